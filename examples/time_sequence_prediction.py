"""An optimizer that steps with a closure: LBFGS on sine waves (pytorch/examples'
time_sequence_prediction, in miniature).

``torch.optim.LBFGS.step`` needs a closure that recomputes the loss. The model is a plain
``nn.Module`` trained with ``F.mse_loss``, and ember hands LBFGS the step's loss function: its
first evaluation is the step's own forward and backward, every later one runs the step again,
so each evaluation LBFGS asks for costs one forward and one backward, as in the original's
hand-written closure, none wasted.

    python examples/time_sequence_prediction.py --epochs 3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import Learner, LearningResult, LossMetric, SupervisedTraining

Waves = tuple[torch.Tensor, torch.Tensor]
"""Sequences ``[B, T]`` and their next values ``[B, T]``: each step predicts the next value."""


class Sequence(nn.Module):
    """Two LSTM cells and a linear read-out, one value per time step."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)
        self.calls = 0  # forward passes so far: one per evaluation of the loss

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        batch = inputs.shape[0]
        h1 = c1 = h2 = c2 = torch.zeros(batch, self.hidden)
        outputs = []
        for value in inputs.split(1, dim=1):
            h1, c1 = self.lstm1(value, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)


def waves(count: int, seed: int, length: int = 40) -> list[torch.Tensor]:
    """Sine waves with random phases."""
    generator = torch.Generator().manual_seed(seed)
    phase = torch.randint(-40, 40, (count, 1), generator=generator).float()
    return list(torch.sin((torch.arange(length + 1).float() + phase) / 4.0))


def loader(count: int, seed: int) -> DataLoader[Waves]:
    """All ``count`` waves in one batch, as ``(inputs, targets)``."""

    def batch(items: list[torch.Tensor], device: torch.device) -> Waves:
        data = torch.stack(items).to(device)
        return data[:, :-1], data[:, 1:]

    return DataLoaderBuilder(batch).batch_size(count).build(InMemDataset(waves(count, seed)))


def main(argv: list[str] | None = None) -> LearningResult[Sequence]:
    """Train for ``--epochs`` LBFGS steps on 16 waves (one batch an epoch)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/time-sequence"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = Sequence()
    optim = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=10)
    return (
        SupervisedTraining(args.dir, loader(16, 1), loader(4, 2))
        .metrics(LossMetric())
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .launch(Learner(model, optim, loss=F.mse_loss))
    )


if __name__ == "__main__":
    main()
