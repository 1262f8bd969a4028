"""A LightningCLI experiment brought over to ember: the ember half of docs/migrate/lightning.md.

The Lightning project (in the guide) is a ``LightningDataModule`` of scikit-learn's 8x8 digits,
a ``LightningModule`` classifier and ``LightningCLI``, whose YAML sets the trainer (epochs,
seed, early stopping, the best checkpoint), the model and the data; it fits, then tests the
best checkpoint. Here the data module is an ``ember.data.DataModule``, the module a plain
``nn.Sequential`` trained with ``loss=``, and the trainer's section a ``TrainingOptions``:
``ember.cli`` turns ``main``'s parameters into the same options, YAML and ``--help``::

    python examples/migrate/lightning_after.py --config examples/migrate/lightning_after.yaml
    python examples/migrate/lightning_after.py --config examples/migrate/lightning_after.yaml \\
        --training.num_epochs 5 --data.batch_size 64 --lr 0.01
    python examples/migrate/lightning_after.py --help       # --data.help DigitsData: the data's
    python examples/migrate/lightning_after.py --config runs/digits/version_0/config.yaml

Each run goes to a new ``version_N`` of ``directory`` and records its options there
(``config.yaml``); nothing is downloaded. Needs ``pip install ember[cli,examples]``.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import ember
from ember import AccuracyMetric, DataLoader, DataLoaderBuilder, InMemDataset, Learner, LossMetric
from ember.data import DataModule
from ember.train import EarlyStoppingOptions, LearningResult, SupervisedTraining, TrainingOptions

Batches = DataLoader[tuple[torch.Tensor, torch.Tensor]]  # (images [B, 64], labels [B])


@dataclass
class DigitsData(DataModule):
    """scikit-learn's 8x8 digits, split into train, valid and test sets by a seed."""

    batch_size: int = 32
    """Images per training batch."""
    valid_size: int = 297
    """Images held out for validation."""
    test_size: int = 300
    """Images held out to test the best epoch."""

    def setup(self) -> None:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        items = list(zip(torch.tensor(x, dtype=torch.float32) / 16, torch.tensor(y), strict=True))
        sizes = [len(items) - self.valid_size - self.test_size, self.valid_size, self.test_size]
        split = torch.Generator().manual_seed(0)
        self.train, self.valid, self.test = torch.utils.data.random_split(items, sizes, split)

    def train_loader(self) -> Batches:
        builder = DataLoaderBuilder().batch_size(self.batch_size).shuffle(0)
        return builder.build(InMemDataset(self.train))

    def valid_loader(self) -> Batches:
        return DataLoaderBuilder().batch_size(256).build(InMemDataset(self.valid))

    def test_loader(self) -> Batches:
        return DataLoaderBuilder().batch_size(256).build(InMemDataset(self.test))


def main(
    training: TrainingOptions = TrainingOptions(
        num_epochs=30,
        seed=0,
        default_checkpointers=True,
        early_stopping=EarlyStoppingOptions(metric="Loss", patience=3),
        summary=True,
        versioned=True,
    ),
    data: DigitsData = DigitsData(),  # noqa: B008  # ember.cli builds a new one from the config
    hidden: int = 64,
    lr: float = 3e-3,
    directory: Path = Path("runs/digits"),
) -> LearningResult[nn.Sequential]:
    """Train an MLP on the digits, then test its best epoch.

    Args:
        hidden: Width of the hidden layer.
        lr: Adam's learning rate.
        directory: Where the runs go, each in a new version_N.
    """
    model = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=lr), loss=F.cross_entropy)
    result = (
        SupervisedTraining(directory, data)
        .metrics(LossMetric(), AccuracyMetric())
        .with_options(training)
        .launch(learner)
    )
    result.evaluate([("test", data.test_loader())], LossMetric(), AccuracyMetric())
    return result


if __name__ == "__main__":
    ember.cli(main)
