"""examples/custom_strategy.py: a strategy of its own on the StrategyRun contract, in a run."""

from __future__ import annotations

import importlib
import io
import itertools
import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

from ember._protocols import check_protocol
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LossMetric,
    SupervisedLearningStrategy,
    SupervisedTraining,
)
from tests.train.fixtures import TinyRegressor, loader, read_lines

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    return importlib.import_module("custom_strategy")


def test_main_trains_and_prints_a_line_per_epoch(
    example: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example's main trains the demo MLP with its strategy and prints each epoch."""
    result = example.main(["--epochs", "3", "--dir", str(tmp_path / "run")])
    assert result.error is None, result.traceback
    assert result.last_epoch == 3
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for epoch, line in enumerate(lines, start=1):
        assert re.fullmatch(
            rf"epoch {epoch}: train \d+\.\d{{3}} s \(\d+ items/s\), "
            r"valid \d+\.\d{3} s",
            line,
        )
    losses = [read_lines(tmp_path / "run" / "valid" / f"epoch-{e}" / "Loss.log") for e in (1, 3)]
    assert float(losses[1][-1].split(",")[0]) < float(losses[0][-1].split(",")[0])  # it trains


def test_strategy_times_the_splits_with_the_given_clock(
    example: ModuleType, tmp_path: Path, model: TinyRegressor
) -> None:
    """The strategy satisfies the protocol, reads the injected clock and keeps every epoch."""
    ticks = itertools.count(step=0.5)
    stream = io.StringIO()
    strategy = example.TimedSingleDevice("cpu", stream, clock=lambda: next(ticks))
    # the example's class, checked against the protocol as the builder checks it: every
    # required member is there (the optional ones have defaults)
    check_protocol(strategy, SupervisedLearningStrategy, "strategy")
    result = (
        SupervisedTraining(tmp_path / "run", loader(20, 4), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(2)
        .with_training_strategy(strategy)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    assert stream.getvalue().splitlines() == [
        "epoch 1: train 0.500 s (40 items/s), valid 0.500 s",
        "epoch 2: train 0.500 s (40 items/s), valid 0.500 s",
    ]
    assert [times.epoch for times in strategy.epochs] == [1, 2]
    assert len(read_lines(tmp_path / "run" / "train" / "epoch-2" / "Loss.log")) == 6
