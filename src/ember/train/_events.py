"""The events the training loop emits; the metrics thread turns them into numbers and lines.

Order for one run (single device, no interrupt; reference §3.3)::

    train: Start(total_epochs, starting_epoch)
    for each epoch e:
        train: StartSplit(e, n_train) · ProcessedItem (one per batch) · EndSplit(e)
        valid: StartSplit(e, n_valid) · ProcessedItem (one per batch) · EndSplit(e)
        train: EndEpoch(e)
    train: End(summary)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ember.data import Progress

__all__ = [
    "End",
    "EndEpoch",
    "EndSplit",
    "LearnerEvent",
    "ProcessedItem",
    "Start",
    "StartSplit",
    "TrainingItem",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class TrainingItem(Generic[T]):
    """One batch's output with where it came from and the learning rate it was trained with."""

    item: T
    progress: Progress
    iteration: int
    lr: float | None


@dataclass(frozen=True, slots=True)
class Start:
    """Training begins (or resumes at ``starting_epoch``)."""

    total_epochs: int
    starting_epoch: int


@dataclass(frozen=True, slots=True)
class StartSplit:
    """A split (train or valid pass) of ``epoch`` begins over ``total_items`` items (None when
    unknown: a streaming loader)."""

    epoch: int
    total_items: int | None


@dataclass(frozen=True, slots=True)
class ProcessedItem(Generic[T]):
    """A batch was processed."""

    item: TrainingItem[T]


@dataclass(frozen=True, slots=True)
class EndSplit:
    """The split of ``epoch`` ended."""

    epoch: int


@dataclass(frozen=True, slots=True)
class EndEpoch:
    """Both splits of ``epoch`` ended."""

    epoch: int


@dataclass(frozen=True, slots=True)
class End:
    """Training ended; ``summary`` is set when the builder asked for one."""

    summary: Any = None


LearnerEvent = Start | StartSplit | ProcessedItem[Any] | EndSplit | EndEpoch | End
