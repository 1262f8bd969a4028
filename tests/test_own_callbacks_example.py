"""examples/own_callbacks.py: EMA and max_time written as a user's own callbacks equal the
catalogue's."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import EMA, CliMetricsRenderer, Learner, LossMetric, SupervisedTraining

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def own(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("own_callbacks")


def run(directory: Path, *callbacks: Any, resume: bool = False, epochs: int = 4) -> nn.Module:
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    data = list(zip(x, x.sum(dim=1, keepdim=True), strict=True))
    train = DataLoaderBuilder().batch_size(16).shuffle(0).build(InMemDataset(data))
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    training = (
        SupervisedTraining(directory, train)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .with_default_checkpointers()
        .with_callbacks(*callbacks)
    )
    if resume:
        training = training.resume_latest()
    learner = Learner(model, torch.optim.Adam(model.parameters()), loss=nn.MSELoss())
    assert training.launch(learner).error is None
    return model


def test_a_users_moving_average_equals_ema_across_a_resume(own: ModuleType, tmp_path: Path) -> None:
    """MovingAverage(0.9), trained 2 epochs then resumed to 4, holds EMA(0.9)'s average of an
    uninterrupted run, bit for bit."""
    ours = EMA(0.9)
    run(tmp_path / "a", ours)
    run(tmp_path / "b", own.MovingAverage(0.9), epochs=2)
    theirs = own.MovingAverage(0.9)
    run(tmp_path / "b", theirs, resume=True)
    assert ours.averaged is not None
    for (name, a), b in zip(
        ours.averaged.state_dict().items(), theirs.averaged.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_users_time_budget_stops_the_run(own: ModuleType, tmp_path: Path) -> None:
    """TimeBudget(0.3) ends a run of 10,000 epochs after the step past 0.3 s, saying so."""
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=generator)
    data = list(zip(x, x.sum(dim=1, keepdim=True), strict=True))
    train = DataLoaderBuilder().batch_size(16).build(InMemDataset(data))
    model = nn.Linear(4, 1)
    training = (
        SupervisedTraining(tmp_path, train)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .num_epochs(10_000)
        .with_callbacks(own.TimeBudget(0.3))
    )
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.01), loss=nn.MSELoss())
    result = training.launch(learner)
    assert result.stop_reason == "the time budget of 0.3s ran out"
    assert result.last_epoch < 10_000
