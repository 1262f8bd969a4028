"""A tracker in 15 lines: every metric value as one JSON line, with the run's configuration first
and its summary and files last.

A logger is any class with the methods of :class:`ember.extend.MetricLogger` (a
``typing.Protocol``: no base class). ember calls ``start(config)`` at launch, before training
(raise there if the tracker is unreachable); ``log(values)`` on its metrics thread for each batch
and for the epoch values, each :class:`ember.extend.MetricValue` a number with its metric name,
split, epoch, global step and weight; ``end_split``; then ``end(summary, artifacts)`` and
``close()``. The same shape fits any tracker (Weights & Biases, Neptune, Comet, ...): replace
the ``write`` calls with the tracker's own. The file logs under the run directory stay beside it.

    python examples/json_lines_logger.py --epochs 3
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ember.app.demo import Mlp, make_samples, sample_batcher
from ember.data import DataLoaderBuilder, InMemDataset
from ember.extend import MetricValue
from ember.train import (
    Learner,
    LearnerSummary,
    LearningResult,
    LossMetric,
    Split,
    SupervisedTraining,
)


class JsonLinesLogger:
    """Appends ``{"metric": ..., "split": ..., "epoch": ..., "step": ..., "value": ...}`` lines."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, record: Mapping[str, Any]) -> None:
        with self.path.open("a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")

    def start(self, config: Mapping[str, Any]) -> None:
        self.write({"config": config})

    def log(self, values: Sequence[MetricValue]) -> None:
        for v in values:
            record = {"metric": v.name, "split": v.split.value, "epoch": v.epoch, "step": v.step}
            self.write({**record, "value": v.value, "weight": v.weight, "final": v.final})

    def end_split(self, epoch: int, split: Split) -> None:
        pass

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        self.write(
            {"summary": str(summary), "artifacts": {k: str(p) for k, p in artifacts.items()}}
        )

    def close(self) -> None:
        pass


def main(argv: list[str] | None = None) -> LearningResult[Mlp]:
    """Train the demo's MLP, logging to ``DIR/metrics.jsonl`` as well as the file logs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/json-lines"))
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    model = Mlp()
    loaders = [
        DataLoaderBuilder(sample_batcher).batch_size(32).build(InMemDataset(make_samples(n, seed)))
        for n, seed in ((200, 1), (64, 2))
    ]
    args.dir.mkdir(parents=True, exist_ok=True)
    return (
        SupervisedTraining(args.dir, *loaders)
        .metrics(LossMetric())
        .num_epochs(args.epochs)
        .overwrite()  # a rerun replaces this example's earlier run
        .hparams({"model": "Mlp"})
        .summary()
        .with_metric_logger(JsonLinesLogger(args.dir / "metrics.jsonl"))
        .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    )


if __name__ == "__main__":
    main()
