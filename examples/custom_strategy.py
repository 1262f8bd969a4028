"""A custom training strategy: one device, and a line per epoch saying how long each split took.

A strategy is any object with ``is_main`` and ``start(model, loaders)`` returning a
``StrategyRun`` (the ``SupervisedLearningStrategy`` protocol; no base class needed): it decides
where the model and the loaders live and how a unit of work runs; the Learner builds its
optimizer on the placed parameters afterwards. The loop is ember's and the same for every
strategy — the events, the accumulation window, checkpoints, early stopping, interrupts — so a
custom strategy behaves like the built-in ones in all of that. ``LocalRun`` (from
``ember.extend``) supplies what every single-process run shares; this one is ``SingleDevice``
with a stopwatch around each pass. Pass it with ``SupervisedTraining(...).with_training_strategy``.

    python examples/custom_strategy.py --epochs 5
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import torch
from torch import nn

from ember.app.demo import Batch, Mlp, make_samples, sample_batcher
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset, Progress
from ember.extend import LocalRun, add_gradients, with_progress
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearningResult,
    LossMetric,
    SupervisedTraining,
    TrainOutput,
    current_step,
)


@dataclass(frozen=True, slots=True)
class EpochTimes:
    """How long the splits of one epoch took, in seconds."""

    epoch: int
    train_seconds: float
    valid_seconds: float


class TimedSingleDevice:
    """Trains on ``device`` like ``SingleDevice`` and prints each epoch's split times."""

    is_main = True  # the only process: it renders and writes the files

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

    def start(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> TimedRun:
        """Put the model and the loaders (``train``, ``valid``) on the device."""
        model.to(self.device)
        placed = {name: loader.to_device(self.device) for name, loader in loaders.items()}
        return TimedRun(self, model, placed)


class TimedRun(LocalRun):
    """One model on one device; each pass timed with the strategy's clock."""

    def __init__(
        self, strategy: TimedSingleDevice, model: nn.Module, loaders: dict[str, DataLoader[Any]]
    ) -> None:
        self._strategy = strategy
        self._model = model
        self.replicas = (model,)  # gradient checkpointing applies to these
        self.loaders = loaders  # their states go into checkpoints
        self._epoch = 0
        self._train_seconds = 0.0

    def train_pass(self) -> Iterator[tuple[Any, Progress]]:
        start = self._strategy.clock()
        yield from with_progress(self.loaders["train"])
        self._train_seconds = self._strategy.clock() - start

    def train_step(self, learner: Learner[Any], batch: Any) -> Sequence[TrainOutput[Any]]:
        context = current_step()  # where the loop is: epoch, iteration, optimizer steps
        self._epoch = context.epoch if context is not None else self._epoch
        output = learner.train_step(batch)
        add_gradients(self._model, output.grads)  # a no-op for TrainOutput.from_loss's
        return (output,)

    def valid_pass(self, name: str) -> Iterator[tuple[Any, Progress]]:
        strategy = self._strategy
        start = strategy.clock()
        yield from with_progress(self.loaders[name])
        times = EpochTimes(self._epoch, self._train_seconds, strategy.clock() - start)
        strategy.epochs.append(times)
        items = self.loaders["train"].num_items() or 0
        rate = items / times.train_seconds if times.train_seconds > 0 else 0.0
        print(
            f"epoch {times.epoch}: train {times.train_seconds:.3f} s ({rate:.0f} items/s), "
            f"valid {times.valid_seconds:.3f} s",
            file=strategy.stream,
            flush=True,
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
        .overwrite()  # a rerun replaces this example's earlier run
        .renderer(CliMetricsRenderer(sys.stderr))  # stdout is the strategy's
        .with_training_strategy(TimedSingleDevice())
        .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    )


if __name__ == "__main__":
    main()
