"""The digits classifier, configured entirely by a YAML file and the command line (``ember.cli``).

An MLP on scikit-learn's bundled 8x8 handwritten digits (nothing downloaded). Every option is a
parameter of ``main`` or a field of its dataclasses; ``digits_config.yaml`` beside this file sets
them all, and any can be overridden on the command line::

    python examples/digits_config.py --config examples/digits_config.yaml
    python examples/digits_config.py --config examples/digits_config.yaml --optimizer.lr 0.01
    python examples/digits_config.py --config examples/digits_config.yaml --print_config
    python examples/digits_config.py --help
    python examples/digits_config.py --config runs/digits/version_0/config.yaml   # that run again

Each run goes into a new ``version_N`` of ``directory`` and records its resolved options there
(``config.yaml``, and ``config.json``'s ``cli``). Needs ``pip install ember[cli,examples]``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    SupervisedTraining,
    TrainOutput,
)


@dataclass(frozen=True)
class Data:
    """The digits and their loaders."""

    batch_size: int = 32
    """Images per batch."""
    valid_size: int = 360
    """Images kept for validation, drawn by the split seed."""
    split_seed: int = 0
    """The seed of the permutation that splits the images."""
    shuffle_seed: int | None = 7
    """The training loader's shuffle seed; null: in order."""


@dataclass(frozen=True)
class Model:
    """The network: Linear(64, hidden), the activation, Linear(hidden, 10)."""

    hidden: int = 128
    """Width of the hidden layer."""
    activation: Literal["relu", "gelu", "tanh"] = "relu"
    """The hidden layer's activation."""
    seed: int = 0
    """The seed of the initial weights."""


@dataclass(frozen=True)
class Optimizer:
    """The optimizer."""

    kind: Literal["adam", "sgd"] = "adam"
    """Which torch.optim optimizer."""
    lr: float = 3e-3
    """The learning rate."""
    weight_decay: float = 0.0
    """L2 penalty."""


@dataclass(frozen=True)
class Batch:
    images: torch.Tensor
    labels: torch.Tensor


def batcher(items: list[tuple[torch.Tensor, int]], device: torch.device) -> Batch:
    images = torch.stack([image for image, _ in items]).to(device)
    return Batch(images, torch.tensor([label for _, label in items], device=device))


class Mlp(LearnerModel):
    def __init__(self, model: Model) -> None:
        super().__init__()
        activation = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh}[model.activation]
        self.net = nn.Sequential(
            nn.Linear(64, model.hidden), activation(), nn.Linear(model.hidden, 10)
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        scores: torch.Tensor = self.net(images)
        return scores

    def classification(self, batch: Batch) -> ClassificationOutput:
        scores = self(batch.images)
        return ClassificationOutput(F.cross_entropy(scores, batch.labels), scores, batch.labels)

    def train_step(self, batch: Batch) -> TrainOutput[ClassificationOutput]:
        out = self.classification(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> ClassificationOutput:
        return self.classification(batch)


def digits(data: Data) -> tuple[list[tuple[torch.Tensor, int]], list[tuple[torch.Tensor, int]]]:
    """(train, valid): the 1797 images scaled to [0, 1] with their labels, split by the seed."""
    from sklearn.datasets import load_digits

    loaded = load_digits()
    pixels = torch.as_tensor(loaded.data, dtype=torch.float32) / 16.0
    order = torch.randperm(len(pixels), generator=torch.Generator().manual_seed(data.split_seed))
    items = [(pixels[i], int(loaded.target[i])) for i in order.tolist()]
    return items[data.valid_size :], items[: data.valid_size]


def loader(
    items: list[tuple[torch.Tensor, int]], batch_size: int, shuffle: int | None
) -> DataLoader[Batch]:
    """The items in batches, shuffled every epoch from ``shuffle`` (None: in order)."""
    builder = DataLoaderBuilder(batcher).batch_size(batch_size)
    if shuffle is not None:
        builder.shuffle(shuffle)
    return builder.build(InMemDataset(items))


def main(
    directory: Path = Path("runs/digits"),
    epochs: int = 15,
    data: Data = Data(),
    model: Model = Model(),
    optimizer: Optimizer = Optimizer(),
    resume: bool = False,
) -> LearningResult[Mlp]:
    """Train an MLP on scikit-learn's 8x8 digits.

    Args:
        directory: Where the runs go, each in a new version_N.
        epochs: Epochs to train (absolute, also when resuming).
        resume: Go on in the newest version from its last checkpoint.
    """
    train, valid = digits(data)
    torch.manual_seed(model.seed)
    net = Mlp(model)
    kind = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer.kind]
    training = (
        SupervisedTraining(
            directory,
            loader(train, data.batch_size, data.shuffle_seed),
            loader(valid, data.batch_size, None),
        )
        .metrics(LossMetric(), AccuracyMetric())
        .num_epochs(epochs)
        .with_default_checkpointers()
        .versioned()
        .summary()
    )
    if resume:
        training = training.resume_latest()
    opt = kind(net.parameters(), lr=optimizer.lr, weight_decay=optimizer.weight_decay)
    return training.launch(Learner(net, opt, optimizer.lr))


if __name__ == "__main__":
    ember.cli(main)
