"""A variational auto-encoder (pytorch/examples' vae, in miniature, on scikit-learn's 8x8 digits).

Its loss is *summed* over the batch (``reduction="sum"``, plus the KL term), and the original
reports it per image: ``LossOutput(loss, summed_over=len(images))`` says so, and ``Loss`` logs
``loss / len(images)`` per batch and, per epoch, the sum over the epoch divided by its images:
the original's "Average loss" to the last bit. ``inference_step`` keeps the first validation
batch's reconstructions of each epoch, as the original saves an image of them: the step context
says which batch it is (``current_step().iteration``). Nothing is downloaded (``pip install
ember[examples]`` for scikit-learn).

    python examples/vae.py --epochs 5
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    LossOutput,
    SupervisedTraining,
    TrainOutput,
    current_step,
)

PIXELS, LATENT = 64, 8


class Vae(LearnerModel):
    """Encoder to a Gaussian of ``LATENT`` dimensions, a sample of it, decoder back to pixels."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(PIXELS, 32)
        self.fc21 = nn.Linear(32, LATENT)
        self.fc22 = nn.Linear(32, LATENT)
        self.fc3 = nn.Linear(LATENT, 32)
        self.fc4 = nn.Linear(32, PIXELS)
        self.reconstructions: dict[int, torch.Tensor] = {}
        """Per epoch: the first validation batch's first 8 images and their reconstructions."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = F.relu(self.fc1(x))
        mu, logvar = self.fc21(hidden), self.fc22(hidden)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.fc4(F.relu(self.fc3(z)))), mu, logvar

    def loss(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The summed reconstruction loss plus the KL divergence, and the reconstructions."""
        recon, mu, logvar = self(x)
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        return bce + kld, recon

    def train_step(self, x: torch.Tensor) -> TrainOutput[LossOutput]:
        loss, _ = self.loss(x)
        return TrainOutput.from_loss(self, loss, LossOutput(loss, summed_over=len(x)))

    def inference_step(self, x: torch.Tensor) -> LossOutput:
        loss, recon = self.loss(x)
        context = current_step()
        if context is not None and context.iteration == 1:  # the pass's first batch
            self.reconstructions[context.epoch] = torch.cat([x[:8], recon[:8]]).view(-1, 8, 8)
        return LossOutput(loss, summed_over=len(x))


def loaders() -> tuple[DataLoader[torch.Tensor], DataLoader[torch.Tensor]]:
    """The digits' pixels in [0, 1], ``[B, 64]``: 1500 shuffled to train, 297 to validate."""
    from sklearn.datasets import load_digits

    pixels = list(torch.tensor(load_digits().data, dtype=torch.float32) / 16)
    return (
        DataLoaderBuilder().batch_size(64).shuffle(0).build(InMemDataset(pixels[:1500])),
        DataLoaderBuilder().batch_size(64).build(InMemDataset(pixels[1500:])),
    )


def main(argv: list[str] | None = None) -> LearningResult[Vae]:
    """Train for ``--epochs`` epochs with Adam (lr 1e-3), as the original."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/vae"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = Vae()
    train, valid = loaders()
    return (
        SupervisedTraining(args.dir, train, valid)
        .metrics(LossMetric())
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .launch(Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3)))
    )


if __name__ == "__main__":
    main()
