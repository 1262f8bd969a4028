"""An optimizer that steps with a closure: LBFGS on sine waves (pytorch/examples'
time_sequence_prediction, in miniature).

``torch.optim.LBFGS.step`` needs a closure that recomputes the loss; the model's own
``optimize`` builds it from the batch of the step, which ``current_step()`` hands it. ember
refuses LBFGS with the default ``optimize``, pointing here.

    python examples/time_sequence_prediction.py --epochs 3
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    GradientsParams,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
    current_step,
)


@dataclass(frozen=True, slots=True)
class Waves:
    """Sequences ``[B, T]``: each step predicts the next value."""

    inputs: torch.Tensor
    targets: torch.Tensor


class Sequence(LearnerModel):
    """Two LSTM cells and a linear read-out, one value per time step."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        batch = inputs.shape[0]
        h1 = c1 = h2 = c2 = torch.zeros(batch, self.hidden)
        outputs = []
        for value in inputs.split(1, dim=1):
            h1, c1 = self.lstm1(value, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            outputs.append(self.linear(h2))
        return torch.cat(outputs, dim=1)

    def regression(self, batch: Waves) -> RegressionOutput:
        out = self(batch.inputs)
        return RegressionOutput(F.mse_loss(out, batch.targets), out, batch.targets)

    def train_step(self, batch: Waves) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Waves) -> RegressionOutput:
        return self.regression(batch)

    def optimize(self, optim: torch.optim.Optimizer, lr: float, grads: GradientsParams) -> None:
        """LBFGS's step, with a closure over the step's batch."""
        context = current_step()
        assert context is not None  # the loop calls optimize inside a step
        batch: Waves = context.batch

        def closure() -> torch.Tensor:
            optim.zero_grad()
            loss = F.mse_loss(self(batch.inputs), batch.targets)
            torch.autograd.backward(loss)
            return loss

        optim.step(closure)  # type: ignore[arg-type]  # torch types the closure as returning float
        for param in self.parameters():
            param.grad = None


def waves(count: int, seed: int, length: int = 40) -> list[torch.Tensor]:
    """Sine waves with random phases."""
    generator = torch.Generator().manual_seed(seed)
    phase = torch.randint(-40, 40, (count, 1), generator=generator).float()
    return list(torch.sin((torch.arange(length + 1).float() + phase) / 4.0))


def loader(count: int, seed: int) -> DataLoader[Waves]:
    def batch(items: list[torch.Tensor], device: torch.device) -> Waves:
        data = torch.stack(items).to(device)
        return Waves(data[:, :-1], data[:, 1:])

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
        .launch(Learner(model, optim))
    )


if __name__ == "__main__":
    main()
