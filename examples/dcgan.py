"""Two optimizers: a small GAN on synthetic 2-D points (pytorch/examples' dcgan, in miniature).

``Learner(model, {"generator": ..., "discriminator": ...})`` gives the model both optimizers;
the model's own ``optimize`` steps them, as dcgan does: the discriminator on the batch's
gradients (``train_step`` computed them), then the generator on a fresh loss. Each keeps its
own learning rate, and both are in every checkpoint. ``current_step()`` tells the model where
it is: every ``--sample-every`` optimizer steps it keeps a few generated points.

    python examples/dcgan.py --epochs 3
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.extend import LossInput, register_adaptor
from ember.train import (
    GradientsParams,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    SupervisedTraining,
    TrainOutput,
    current_step,
)

NOISE = 8


@dataclass(frozen=True, slots=True)
class GanOutput:
    """The discriminator's loss (logged as Loss) and the generator's, per batch."""

    loss: torch.Tensor
    generator_loss: torch.Tensor


@register_adaptor(GanOutput, LossInput)
def _loss(output: GanOutput) -> LossInput:
    return LossInput(output.loss)


class Gan(LearnerModel):
    """A generator of 2-D points and a discriminator telling them from real ones."""

    def __init__(self, sample_every: int = 50) -> None:
        super().__init__()
        self.generator = nn.Sequential(nn.Linear(NOISE, 32), nn.ReLU(), nn.Linear(32, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
        self.sample_every = sample_every
        self.samples: list[torch.Tensor] = []

    def losses(self, real: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The discriminator's loss on real and (detached) fake points, and the fake points."""
        fake = self.generator(torch.randn(real.shape[0], NOISE))
        real_logits = self.discriminator(real)
        fake_logits = self.discriminator(fake.detach())
        loss = F.binary_cross_entropy_with_logits(real_logits, torch.ones_like(real_logits))
        loss = loss + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        return loss, fake

    def train_step(self, batch: torch.Tensor) -> TrainOutput[GanOutput]:
        loss, fake = self.losses(batch)
        logits = self.discriminator(fake)
        generator_loss = F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits))
        return TrainOutput.from_loss(self, loss, GanOutput(loss, generator_loss.detach()))

    def inference_step(self, batch: torch.Tensor) -> GanOutput:
        loss, fake = self.losses(batch)
        logits = self.discriminator(fake)
        return GanOutput(loss, F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits)))

    def optimize(self, optim: Any, lr: float, grads: GradientsParams) -> None:
        """Step the discriminator with the batch's gradients, then the generator."""
        optimizers: dict[str, torch.optim.Optimizer] = optim
        optimizers["discriminator"].step()
        context = current_step()
        assert context is not None  # the loop calls optimize inside a step
        for param in self.parameters():
            param.grad = None
        fake = self.generator(torch.randn(context.batch.shape[0], NOISE))
        logits = self.discriminator(fake)
        torch.autograd.backward(F.binary_cross_entropy_with_logits(logits, torch.ones_like(logits)))
        optimizers["generator"].step()
        for param in self.parameters():
            param.grad = None
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
        .metrics(LossMetric())
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .with_default_checkpointers()
        .launch(Learner(model, optimizers))
    )


if __name__ == "__main__":
    main()
