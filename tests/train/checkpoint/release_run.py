"""A run whose checkpoints a release wrote, kept as test data: what it trains and how it stops.

``python -m tests.train.checkpoint.release_run DIR`` writes, with the ember installed, the two
run directories the resume tests read (``tests/train/checkpoint/data/release-<version>/``):

- ``rounds``: 4 epochs asked, stopped by its interrupter after epoch 2's validation (epoch
  checkpoints, ``run-end.json`` absent);
- ``mid_round``: the same run stopped inside epoch 3 at optimizer step 20 (a ``step-20``
  checkpoint: the round's counters, the train metrics' running states, the logs' positions).

Everything a checkpoint holds is exercised: Adam's state, a torch scheduler, dropout (RNG
states), a shuffled loader on two worker threads, early stopping's state, the checkpointing
strategy's state, a user ``Stateful``. The tests resume both under the current code and compare
with an uninterrupted run of the current code: every weight and every ``Loss.log`` line equal.
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    MetricEarlyStoppingStrategy,
    RegressionOutput,
    StoppingCondition,
    SupervisedTraining,
    TorchLrScheduler,
    TrainOutput,
    current_step,
)

__all__ = ["EPOCHS", "STOP_STEP", "Counter", "DropoutRegressor", "train"]

EPOCHS = 4
STOP_STEP = 20
"""The optimizer step inside epoch 3 where ``mid_round`` stops (8 steps an epoch)."""


class DropoutRegressor(LearnerModel):
    """``Linear(3, 8) → Dropout → ReLU → Linear(8, 1)`` with MSE; stops its run when told."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.2), nn.ReLU(), nn.Linear(8, 1))
        self.stop_at: tuple[int, Any] | None = None  # (optimizer step, interrupter)

    def regression(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        x, y = batch
        out = self.net(x)
        return RegressionOutput(loss=F.mse_loss(out, y), output=out, targets=y)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> TrainOutput[Any]:
        step = current_step()
        if self.stop_at is not None and step is not None:
            at, interrupter = self.stop_at
            if step.optimizer_steps + 1 == at:
                interrupter.stop("test data: stopped inside a round")
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        return self.regression(batch)


class Counter:
    """A user ``Stateful`` that is also hooks: counts the epochs that ended."""

    def __init__(self) -> None:
        self.count = 0

    def on_epoch_start(self, epoch: int) -> None: ...
    def on_split_start(self, split: Any, epoch: int) -> None: ...
    def on_split_end(self, split: Any, epoch: int) -> None: ...

    def on_epoch_end(self, epoch: int) -> None:
        self.count += 1

    def state_dict(self) -> dict[str, Any]:
        return {"count": self.count}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.count = int(state["count"])


def _loaders() -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(48, 3, generator=generator)
    y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(48, 1, generator=generator)
    items = [(x[i], y[i]) for i in range(48)]
    train = DataLoaderBuilder().batch_size(6).shuffle(11).num_workers(2).build(InMemDataset(items))
    valid = DataLoaderBuilder().batch_size(8).build(InMemDataset(items[:16]))
    return train, valid


def train(
    directory: Path,
    *,
    stop_after_epoch: int | None = None,
    stop_at_step: int | None = None,
    resume: bool = False,
) -> LearningResult[DropoutRegressor]:
    """The run: fresh (from the same seed every time) or resumed from ``directory``'s newest
    checkpoint; stopped after an epoch's validation or at an optimizer step, if asked."""
    torch.manual_seed(0)
    model = DropoutRegressor()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5)
    train_loader, valid_loader = _loaders()
    builder = (
        SupervisedTraining(directory, train_loader, valid_loader)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(EPOCHS)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_default_checkpointers()
        .early_stopping(
            MetricEarlyStoppingStrategy("Loss", condition=StoppingCondition(EPOCHS + 1))
        )
        .errors_in_result()
    )
    counter = Counter()
    builder = builder.with_stateful("counter", counter).with_hooks(counter)
    interrupter = builder.interrupter()
    if stop_at_step is not None:
        model.stop_at = (stop_at_step, interrupter)
    if stop_after_epoch is not None:
        builder = builder.with_hooks(_StopAfter(stop_after_epoch, interrupter))
    if resume:
        builder = builder.resume_latest()
    learner = Learner(model, optimizer, TorchLrScheduler(scheduler, interval="step"))
    return builder.launch(learner)


class _StopAfter:
    """Hooks that stop the run once epoch ``epoch`` has ended (between two epochs)."""

    def __init__(self, epoch: int, interrupter: Any) -> None:
        self.epoch, self.interrupter = epoch, interrupter

    def on_epoch_start(self, epoch: int) -> None: ...
    def on_split_start(self, split: Any, epoch: int) -> None: ...
    def on_split_end(self, split: Any, epoch: int) -> None: ...

    def on_epoch_end(self, epoch: int) -> None:
        if epoch == self.epoch:
            self.interrupter.stop("test data: stopped after a round")


def main(argv: list[str]) -> None:
    """Write both run directories under ``argv[0]``."""
    root = Path(argv[0])
    for name, stops in (
        ("rounds", {"stop_after_epoch": 2}),
        ("mid_round", {"stop_at_step": STOP_STEP}),
    ):
        result = train(root / name, **stops)  # type: ignore[arg-type]
        assert result.error is None, result.error
        print(name, result.last_epoch, result.stop_reason)


if __name__ == "__main__":
    main(sys.argv[1:])
