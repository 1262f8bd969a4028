"""Shared pieces of the LearningCheckpointer tests: a loss query, the records of an epoch,
the files a checkpoint leaves."""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from torch import nn

from ember.train import Direction, LearningCheckpointer, Split
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.record import model_record, optimizer_record, state_record

NAMES = ("model", "optim", "scheduler", "state")
TIMEOUT = 30.0  # seconds; only reached when something hangs


class LossQuery:
    """A MetricQuery over valid Loss values by epoch."""

    def __init__(self, losses: dict[int, float]) -> None:
        self.losses = losses

    def find_metric(self, name: str, epoch: int, split: Split) -> float | None:
        return self.losses.get(epoch) if name == "Loss" and split is Split.VALID else None

    def find_epoch(self, name: str, direction: Direction, split: Split) -> int | None:
        if name != "Loss" or split is not Split.VALID or 1 not in self.losses:
            return None
        return min(sorted(self.losses), key=self.losses.__getitem__)


def make_records(model: nn.Module, epoch: int) -> TrainingRecords:
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    return TrainingRecords(
        model=model_record(model),
        optim=optimizer_record(optim),
        scheduler=state_record({"step": epoch}),
        state=state_record({"epoch": epoch, "rng": [1, 2, 3]}),
    )


def run_epochs(
    checkpointer: LearningCheckpointer, losses: list[float], epochs: range | None = None
) -> None:
    model = nn.Linear(2, 1)
    for epoch in epochs or range(1, len(losses) + 1):
        query = LossQuery({e: losses[e - 1] for e in range(1, epoch + 1)})
        checkpointer.checkpoint(epoch, make_records(model, epoch), query)


def files_of(directory: Path, epochs: list[int]) -> list[str]:
    names = [f"{n}-{e}.safetensors" for e in epochs for n in NAMES]
    return sorted(names + [f"manifest-{e}.json" for e in epochs])


def writer_threads() -> int:
    return sum(thread.name == "checkpoint-writer" for thread in threading.enumerate())
