"""ember.cli with a TrainingOptions parameter: every trainer option, recorded, and seeded."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

import ember
from ember.data import DataLoaderBuilder, DataModule, InMemDataset
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining, TrainingOptions
from tests.train.fixtures import TinyRegressor, batcher, samples


@dataclass
class Regression(DataModule):
    """A data module whose constructor's arguments come from the config."""

    batch_size: int = 4
    """Items per batch."""

    def setup(self) -> None:
        self.items = samples(32)

    def train_loader(self) -> Any:
        builder = DataLoaderBuilder(batcher).batch_size(self.batch_size).shuffle(1)
        return builder.build(InMemDataset(self.items[:24]))

    def valid_loader(self) -> Any:
        return DataLoaderBuilder(batcher).batch_size(8).build(InMemDataset(self.items[24:]))


class Dropped(TinyRegressor):
    def __init__(self) -> None:
        super().__init__(nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.3), nn.Linear(8, 1)))


def experiment(
    directory: Path,
    training: TrainingOptions = TrainingOptions(),  # frozen: one shared value
    data: Regression = Regression(),  # noqa: B008  # ember.cli builds one per call
    lr: float = 0.05,
) -> list[torch.Tensor]:
    """Train the regression.

    Args:
        directory: Where the run goes.
        lr: SGD's learning rate.
    """
    model = Dropped()  # initialised after ember.cli seeded: the same weights from the same seed
    training_run = (
        SupervisedTraining(directory, data)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_options(training)
    )
    result = training_run.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=lr)))
    assert result.error is None, result.traceback
    return [p.detach().clone() for p in model.parameters()]


def test_help_lists_every_trainer_option_with_its_words(capsys: pytest.CaptureFixture[str]) -> None:
    """--help lists --training.num_epochs, max_steps, precision, grads_accumulation,
    clip_grad_norm and seed, with their docstrings, and the data module's fields."""
    with pytest.raises(SystemExit) as exited:
        ember.cli(experiment, args=["--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for option in (
        "--training.num_epochs",
        "--training.max_steps",
        "--training.precision {32,bf16-mixed,16-mixed}",
        "--training.grads_accumulation",
        "--training.clip_grad_norm",
        "--training.seed",
        "--data.batch_size",
    ):
        assert option in shown, option
    assert "Seed torch, numpy and Python's random at launch" in shown


def test_the_options_are_recorded_and_a_rerun_from_config_yaml_is_the_same_run(
    tmp_path: Path,
) -> None:
    """With no seed given ember.cli draws one, seeds before main and records it: the run's
    config.yaml holds every option, and --config RUN/config.yaml trains the same weights."""
    first = ember.cli(
        experiment,
        args=[
            "--directory", str(tmp_path / "run"),
            "--training.num_epochs", "2",
            "--training.grads_accumulation", "2",
            "--data.batch_size", "6",
        ],
    )  # fmt: skip
    recorded = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert recorded["training"]["num_epochs"] == 2
    assert recorded["training"]["grads_accumulation"] == 2
    assert isinstance(recorded["training"]["seed"], int)
    assert recorded["data"] == {"batch_size": 6}
    torch.manual_seed(12345)  # whatever the generators hold before
    again = ember.cli(
        experiment,
        args=[
            "--config",
            str(tmp_path / "run" / "config.yaml"),
            "--directory",
            str(tmp_path / "again"),
        ],
    )
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
