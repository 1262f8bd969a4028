"""A custom training strategy: one device, and a line per epoch saying how long each split took.

A strategy is any object with ``fit(learner, train, valid, components, starting_epoch)``
returning a ``FitResult`` (the ``SupervisedLearningStrategy`` protocol; no base class needed):
it decides where the model lives and how one split runs. ``run_epochs`` runs everything around
the splits — the StartSplit/EndSplit/EndEpoch events, checkpoints, early stopping, interrupts —
so a strategy that reuses it behaves like the built-in ones in all of that; ``train_epoch`` and
``valid_epoch`` are the built-in splits. This one is ``SingleDevice`` with a stopwatch around
each split. Pass it with ``SupervisedTraining(...).with_training_strategy(...)``.

    python examples/custom_strategy.py --epochs 5
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch

from ember.app.demo import Batch, Mlp, make_samples, sample_batcher
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearningResult,
    LossMetric,
    SupervisedTraining,
)
from ember.train._epoch import train_epoch, valid_epoch
from ember.train._gradient_checkpointing import checkpointed
from ember.train._strategy.base import FitResult, TrainingComponents, resume, run_epochs


@dataclass(frozen=True, slots=True)
class EpochTimes:
    """How long the splits of one epoch took, in seconds."""

    epoch: int
    train_seconds: float
    valid_seconds: float


class TimedSingleDevice:
    """Trains on ``device`` like ``SingleDevice`` and prints each epoch's split times."""

    def __init__(
        self,
        device: torch.device | str = "cpu",
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.device = torch.device(device)
        self.stream = stream if stream is not None else sys.stdout
        self.clock = clock
        self.epochs: list[EpochTimes] = []

    def fit(
        self,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        """Put model and loaders on the device, then run the epochs with timed splits."""
        train = train.to_device(self.device)
        valid = valid.to_device(self.device)
        learner.fork(self.device)
        loaders = {"train": train, "valid": valid}  # their states go into checkpoints
        resume(components, learner, loaders, starting_epoch)  # a no-op unless resuming
        processor, interrupter = components.processor, components.interrupter
        train_seconds = 0.0

        def train_split(epoch: int) -> None:
            nonlocal train_seconds
            start = self.clock()
            train_epoch(learner, train, processor, interrupter, components.grads_accumulation)
            train_seconds = self.clock() - start

        def valid_split(epoch: int) -> None:
            start = self.clock()
            valid_epoch(learner.model, valid, processor, interrupter)
            times = EpochTimes(epoch, train_seconds, self.clock() - start)
            self.epochs.append(times)
            rate = train.num_items() / times.train_seconds if times.train_seconds > 0 else 0.0
            print(
                f"epoch {epoch}: train {times.train_seconds:.3f} s ({rate:.0f} items/s), "
                f"valid {times.valid_seconds:.3f} s",
                file=self.stream,
                flush=True,
            )

        # Honour SupervisedTraining.gradient_checkpointing(), as the built-in strategies do.
        with checkpointed(components.gradient_checkpointing, learner.model):
            return run_epochs(
                components, learner, loaders, starting_epoch, train_split, valid_split
            )


def loader(count: int, seed: int) -> DataLoader[Batch]:
    """A loader over ``count`` of the demo's regression samples."""
    samples = make_samples(count, seed)
    return (
        DataLoaderBuilder(sample_batcher).batch_size(32).shuffle(seed).build(InMemDataset(samples))
    )


def main(argv: list[str] | None = None) -> LearningResult[Mlp]:
    """Train the demo's MLP with :class:`TimedSingleDevice`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/custom-strategy"))
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = Mlp()
    return (
        SupervisedTraining(args.dir, loader(200, 1), loader(64, 2))
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(args.epochs)
        .renderer(CliMetricsRenderer(sys.stderr))  # stdout is the strategy's
        .with_training_strategy(TimedSingleDevice())
        .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    )


if __name__ == "__main__":
    main()
