"""Shared pieces of the MultiDevice tests: a sum-reduced model, runs that log the loss, the
order of a round's items."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.train import (
    Learner,
    LearnerModel,
    LinearLr,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)
from tests.train.fixtures import Batch, quiet, read_lines

ITEMS = 23  # slices of 11 and 12 items: batches 4,4,3 and 4,4,4 with batch size 4
BATCH = 4


class SumRegressor(LearnerModel):
    """A small MLP with a sum-reduced loss: per-device gradients add up to the full batch's."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))

    def regression(self, batch: Batch) -> RegressionOutput:
        out = self.net(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y, reduction="sum"), out, batch.y)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        return self.regression(batch)


def loss_run(directory: Path, train: Any, valid: Any, epochs: int = 3) -> SupervisedTraining:
    """A quiet run of ``epochs`` epochs that logs the loss."""
    return quiet(directory, train, valid).metrics(LossMetric()).num_epochs(epochs)


def sgd_learner(model: nn.Module) -> Learner[Any]:
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Learner(model, optim, LinearLr(0.02, 0.005, 5))


def round_order(items: int, devices: int, batch: int) -> list[int]:
    """Item order of a single loader whose batches are the rounds' device batches joined."""
    step = items // devices
    ranges = [
        list(range(i * step, (i + 1) * step if i < devices - 1 else items)) for i in range(devices)
    ]
    parts = [[r[j : j + batch] for j in range(0, len(r), batch)] for r in ranges]
    return [item for rnd in zip(*parts, strict=True) for part in rnd for item in part]


def loss_values(directory: Path, epoch: int) -> list[float]:
    lines = read_lines(directory / "train" / f"epoch-{epoch}" / "Loss.log")
    assert lines[-1].endswith(",final")
    return [float(line.split(",")[0]) for line in lines[:-1]]


def no_device_threads() -> bool:
    return not any(t.name.startswith("train-device-") for t in threading.enumerate())
