"""Two optimizers: a small GAN on synthetic 2-D points (pytorch/examples' dcgan, in miniature).

``Learner(model, {"generator": ..., "discriminator": ...})`` gives the model both optimizers;
the model's own ``optimize`` steps them, as dcgan does: the discriminator on the batch's
gradients (``train_step`` computed them), then the generator on a fresh loss. Each keeps its
own learning rate, and both are in every checkpoint. ``current_step()`` tells the model where
it is: ``optimize`` logs the generator's loss through it (``ValueMetric("Generator Loss")``
reads it; the output holds only the discriminator's), and every ``--sample-every`` optimizer
steps it keeps a few generated points.

    python examples/dcgan.py --epochs 3
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

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
    LossOutput,
    SupervisedTraining,
    TrainOutput,
    ValueMetric,
    current_step,
)

NOISE = 8


class Gan(LearnerModel):
    """A generator of 2-D points and a discriminator telling them from real ones."""

    def __init__(self, sample_every: int = 50) -> None:
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(NOISE, 32), nn.ReLU(), nn.Linear(32, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
        self.sample_every = sample_every
        self.samples: list[torch.Tensor] = []

    def discriminator_loss(self, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The discriminator's loss on real and (detached) fake points, and the fake points."""
        fake = self.generator(torch.randn(real.shape[0], NOISE))
        real_logits = self.discriminator(real)
        fake_logits = self.discriminator(fake.detach())
        loss = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
        loss = loss + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        return loss, fake

    def generator_loss(self, fake: torch.Tensor) -> torch.Tensor:
        """How well ``fake`` fools the discriminator (low: well)."""
        logits = self.discriminator(fake)
        return F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))

    def train_step(self, batch: torch.Tensor) -> TrainOutput[LossOutput]:
        loss, _ = self.discriminator_loss(batch)
        return TrainOutput.from_loss(self, loss, LossOutput(loss))

    def inference_step(self, batch: torch.Tensor) -> LossOutput:
        loss, fake = self.discriminator_loss(batch)
        context = current_step()
        assert context is not None  # inference steps run in a step context too
        context.log("Generator Loss", self.generator_loss(fake))
        return LossOutput(loss)

    def optimize(self, optim: Any, lr: float, grads: GradientsParams) -> None:
        """Step the discriminator with the batch's gradients, then the generator."""
        optimizers: dict[str, torch.optim.Optimizer] = optim
        optimizers["discriminator"].step()
        context = current_step()
        assert context is not None  # the loop calls optimize inside a step
        for param in self.parameters():
            param.grad = None
        generator_loss = self.generator_loss(self.generator(torch.randn(len(context.batch), NOISE)))
        torch.autograd.backward(generator_loss)
        optimizers["generator"].step()
        for param in self.parameters():
            param.grad = None
        context.log("Generator Loss", generator_loss)
        if context.optimizer_steps % self.sample_every == 0:
            with torch.no_grad():
                self.samples.append(self.generator(torch.randn(4, NOISE)))


def ring(count: int, seed: int) -> list[torch.Tensor]:
    """Points on a noisy unit circle."""
    generator = torch.Generator().manual_seed(seed)
    angle = torch.rand(count, generator=generator) * 2 * math.pi
    points = torch.stack([angle.cos(), angle.sin()], dim=1)
    return list(points + 0.05 * torch.randn(count, 2, generator=generator))


def loader(count: int, seed: int) -> DataLoader[torch.Tensor]:
    def stack(items: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        return torch.stack(items).to(device)

    return (
        DataLoaderBuilder(stack).batch_size(64).shuffle(seed).build(InMemDataset(ring(count, seed)))
    )


def main(argv: list[str] | None = None) -> LearningResult[Gan]:
    """Train the GAN for ``--epochs`` epochs with both optimizers."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--sample-every", type=int, default=50)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/dcgan"))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    model = Gan(args.sample_every)
    optimizers = {
        "generator": torch.optim.Adam(model.generator.parameters(), lr=2e-3, betas=(0.5, 0.999)),
        "discriminator": torch.optim.Adam(
            model.discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999)
        ),
    }
    return (
        SupervisedTraining(args.dir, loader(1024, 1), loader(256, 2))
        .metrics(LossMetric(), ValueMetric("Generator Loss"))
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .with_default_checkpointers()
        .launch(Learner(model, optimizers))
    )


if __name__ == "__main__":
    main()
