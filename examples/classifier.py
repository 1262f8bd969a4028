"""A plain classifier: a small CNN on scikit-learn's bundled 8x8 digits, with no model class.

The model is an ``nn.Sequential`` and the loss ``F.cross_entropy``: ``Learner(model, optimizer,
loss=F.cross_entropy)`` trains ``loss(model(x), y)`` on each ``(x, y)`` batch, and the task
(classification, told from the first batch and said in ``experiment.log``) makes ``Loss`` and
``Accuracy`` read the scores and the targets. Nothing is downloaded (``pip install
ember[examples]`` for scikit-learn). The README's shortest path is this script's core.

    python examples/classifier.py --epochs 5
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import AccuracyMetric, Learner, LearningResult, LossMetric, SupervisedTraining

Item = tuple[torch.Tensor, torch.Tensor]


def digits() -> tuple[list[Item], list[Item]]:
    """The 1797 images ``[1, 8, 8]`` in [0, 1] with their class, the last 297 for validation."""
    from sklearn.datasets import load_digits

    data = load_digits()
    images = torch.tensor(data.images, dtype=torch.float32).unsqueeze(1) / 16
    items = list(zip(images, torch.tensor(data.target), strict=True))
    return items[:1500], items[1500:]


def loaders() -> tuple[DataLoader[Item], DataLoader[Item]]:
    """Batches of 32 shuffled images, and of 256 for validation (collated as torch does)."""
    train, valid = digits()
    return (
        DataLoaderBuilder().batch_size(32).shuffle(0).build(InMemDataset(train)),
        DataLoaderBuilder().batch_size(256).build(InMemDataset(valid)),
    )


def cnn() -> nn.Sequential:
    """Convolution, pooling and a linear read-out over the ten classes."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, 10),
    )


def main(argv: list[str] | None = None) -> LearningResult[nn.Sequential]:
    """Train the CNN for ``--epochs`` epochs with Adam."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/classifier"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = cnn()
    train, valid = loaders()
    return (
        SupervisedTraining(args.dir, train, valid)
        .metrics(LossMetric(), AccuracyMetric())
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .launch(Learner(model, torch.optim.Adam(model.parameters()), loss=F.cross_entropy))
    )


if __name__ == "__main__":
    main()
