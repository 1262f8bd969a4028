"""A step's gradients are freed once the next step clears the ``.grad`` slots: the loop keeps
no second set of gradients alive through the next backward pass (their memory would double
at its peak), whatever the strategy."""

from __future__ import annotations

import io
import weakref
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)

Batch = tuple[torch.Tensor, torch.Tensor]


class Recording(LearnerModel):
    """A linear regression that records, at each step after the first, whether the previous
    step's weight gradient is still alive once its slot is cleared (what ``from_loss`` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 1)
        self.previous: weakref.ref[torch.Tensor] | None = None
        self.alive: list[bool] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        x, y = batch
        if self.previous is not None:
            self.linear.weight.grad = None
            self.alive.append(self.previous() is not None)
        out = self(x)
        loss = F.mse_loss(out, y)
        output = TrainOutput.from_loss(self, loss, RegressionOutput(loss, out, y))
        grad = self.linear.weight.grad
        assert grad is not None
        self.previous = weakref.ref(grad)
        return output

    def inference_step(self, batch: Batch) -> RegressionOutput:
        x, y = batch
        out = self(x)
        return RegressionOutput(F.mse_loss(out, y), out, y)


def stack(items: list[Batch], device: torch.device) -> Batch:
    return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


def test_the_previous_step_s_gradients_are_freed_when_their_slots_are_cleared(
    tmp_path: Path,
) -> None:
    generator = torch.Generator().manual_seed(0)
    data = [
        (torch.randn(4, generator=generator), torch.randn(1, generator=generator))
        for _ in range(32)
    ]
    train = DataLoaderBuilder(stack).batch_size(8).build(InMemDataset(data))
    model = Recording()
    builder = (
        SupervisedTraining(tmp_path, train)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .num_epochs(1)
    )
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert result.error is None, result.traceback
    assert model.alive == [False, False, False]
