"""No optimizer, and a stop on the training loss (pytorch/examples' regression, in miniature).

The original fits a polynomial with a hand-written update (``param -= 0.1 * param.grad``) and
stops once a batch's loss is below 1e-3. Here the model's own ``optimize`` does that update:
``Learner(model, None, 0.1, loss=F.smooth_l1_loss)`` has no optimizer, and hands ``optimize``
the lr 0.1. ``stop_when(LossMetric(), 1e-3)`` stops the run once a batch's loss reaches 1e-3,
read on the metrics thread: no ``loss.item()`` in the training step.

    python examples/regression.py
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import GradientsParams, Learner, LearningResult, LossMetric, SupervisedTraining

DEGREE = 4


class Polynomial(nn.Linear):
    """``y = w . (x, x^2, x^3, x^4) + b``, updated by hand."""

    def __init__(self) -> None:
        super().__init__(DEGREE, 1)

    def optimize(self, optim: Any, lr: float, grads: GradientsParams) -> None:
        """The original's update: every parameter moves by ``-lr`` times its gradient."""
        with torch.no_grad():
            for param in self.parameters():
                assert param.grad is not None  # every parameter takes part in the loss
                param.add_(-lr * param.grad)
                param.grad = None


def samples(count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(features, target)`` pairs of a random polynomial of degree 4."""
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(DEGREE, 1, generator=generator) * 5
    bias = torch.randn(1, generator=generator) * 5
    x = torch.randn(count, 1, generator=generator)
    features = torch.cat([x**i for i in range(1, DEGREE + 1)], 1)
    return list(zip(features, features @ weight + bias, strict=True))


def loader(count: int = 4096, seed: int = 0) -> DataLoader[Any]:
    """Shuffled batches of 32."""
    return DataLoaderBuilder().batch_size(32).shuffle(seed).build(InMemDataset(samples(count, 0)))


def main(argv: list[str] | None = None) -> LearningResult[Polynomial]:
    """Train until a batch's loss reaches ``--threshold`` (at most ``--epochs`` epochs)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threshold", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/regression"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = Polynomial()
    return (
        SupervisedTraining(args.dir, loader())
        .metrics(LossMetric())
        .stop_when(LossMetric(), args.threshold)
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .launch(Learner(model, None, 0.1, loss=F.smooth_l1_loss))
    )


if __name__ == "__main__":
    result = main()
    print(result.stop_reason)
