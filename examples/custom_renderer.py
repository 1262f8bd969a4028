"""A custom renderer: one line per epoch with the epoch value of each metric.

A renderer is any class with the methods of :class:`ember.train.MetricsRenderer` (a
``typing.Protocol``, so no base class is needed). ember calls them on its metrics thread, in
event order: ``register_metric`` for each metric, ``start``, then per split ``start_split``,
``update_train``/``update_valid`` and ``update_split`` per batch, the epoch values as a last
``update_*`` with ``state.numeric.final`` set, ``end_split``; ``update_epoch`` per epoch; ``end``
and ``on_train_end(summary)`` at the end; then, on the caller's thread, ``on_error(error)`` if
training failed and ``close()``. Methods for what you don't show simply do nothing.

    python examples/custom_renderer.py --epochs 5
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

import torch

from ember.app.demo import Batch, Mlp, make_samples, sample_batcher
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.extend import MetricDefinition, MetricState
from ember.train import (
    Learner,
    LearnerSummary,
    LearningResult,
    LossMetric,
    Split,
    SupervisedTraining,
)


class EpochLineRenderer:
    """Prints ``epoch N: train Loss 0.1234  valid Loss 0.2345`` when an epoch ends."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.values: dict[str, float] = {}

    # what this renderer shows ---------------------------------------------------------------

    def update_train(self, state: MetricState) -> None:
        """Keep the training epoch value (the batch values are ignored)."""
        self._keep("train", state)

    def update_valid(self, state: MetricState) -> None:
        """Keep the validation epoch value."""
        self._keep("valid", state)

    def _keep(self, split: str, state: MetricState) -> None:
        if state.numeric is not None and state.numeric.final:
            self.values[f"{split} {state.entry.name}"] = state.numeric.value

    def update_epoch(self, epoch: int) -> None:
        """Print the epoch's line."""
        shown = "  ".join(f"{name} {value:.4f}" for name, value in self.values.items())
        print(f"epoch {epoch}: {shown}", file=self.stream, flush=True)
        self.values.clear()

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Print the summary table, if the run asked for one."""
        if summary is not None:
            print(summary, file=self.stream)

    def on_error(self, error: BaseException) -> None:
        """Say why training failed (then ``launch`` raises ``TrainingError`` from ``error``)."""
        print(f"training failed: {error!r}", file=self.stream)

    # what it does not show ------------------------------------------------------------------

    def register_metric(self, definition: MetricDefinition) -> None:
        """Nothing to prepare."""

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Nothing to show."""

    def start_split(self, split: Split, total_items: int) -> None:
        """Nothing to show."""

    def update_split(self, items_processed: int) -> None:
        """Nothing to show."""

    def end_split(self) -> None:
        """Nothing to show."""

    def end(self) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to release."""


def loader(count: int, seed: int) -> DataLoader[Batch]:
    """A loader over ``count`` of the demo's regression samples."""
    samples = make_samples(count, seed)
    return DataLoaderBuilder(sample_batcher).batch_size(32).build(InMemDataset(samples))


def main(argv: list[str] | None = None) -> LearningResult[Mlp]:
    """Train the demo's MLP with :class:`EpochLineRenderer`."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/custom-renderer"))
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = Mlp()
    return (
        SupervisedTraining(args.dir, loader(200, 1), loader(64, 2))
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .renderer(EpochLineRenderer())
        .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    )


if __name__ == "__main__":
    main()
