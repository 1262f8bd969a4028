"""What a run is checkpointed through (:class:`RunCheckpointer`, and
:class:`MidRoundCheckpointer` for checkpoints inside a round) and what one checkpoint holds
(:class:`TrainingRecords`). ``learning.py``'s ``LearningCheckpointer`` is ember's; another
store or layout provides the same members."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from ember._rundir.atomic import CheckpointFile
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.record import Record
from ember.train._metric.query import MetricQuery

__all__ = ["MidRoundCheckpointer", "RunCheckpointer", "TrainingRecords"]


@dataclass(frozen=True, slots=True, eq=False)
class TrainingRecords:
    """Everything one checkpoint holds; build each with the functions of ``record.py``."""

    model: Record
    optim: Record
    scheduler: Record
    state: Record
    shards: tuple[CheckpointFile, ...] = ()
    """Files the ranks of a sharded run wrote already (``sharded.py``): the manifest lists them."""


@runtime_checkable
class RunCheckpointer(Protocol):
    """What the training loop checkpoints a run through (``with_checkpointers``).

    :class:`LearningCheckpointer` is ember's; another implementation (another store, another
    layout) provides the same members.
    """

    @property
    def directory(self) -> Path:
        """Where the checkpoints are (named in messages)."""
        ...

    def checkpoint(
        self, epoch: int, records: TrainingRecords, query: MetricQuery
    ) -> TrainingRecords:
        """Save or not, as the checkpointing strategy decides for ``epoch``; returns the records
        as saved (what :meth:`save` takes)."""
        ...

    def save(self, epoch: int, records: TrainingRecords) -> None:
        """Make sure ``epoch`` is saved, whatever the strategy decided."""
        ...

    def restore(self, epoch: int) -> TrainingRecords:
        """The verified records of ``epoch``; :class:`~ember.CheckpointError` if it has none."""
        ...

    def complete_epochs(self) -> list[int]:
        """Every epoch with a complete, verified checkpoint, in order."""
        ...

    def latest_complete_epoch(self) -> int | None:
        """The newest complete epoch, or None."""
        ...

    def close(self) -> None:
        """Finish pending writes; raise a pending write error once."""
        ...


@runtime_checkable
class MidRoundCheckpointer(RunCheckpointer, Protocol):
    """A run checkpointer that also takes checkpoints inside a round (``mid_round.py``):
    ``checkpoint_every(steps=N | seconds=T)`` and a stop inside a round need one."""

    def checkpoint_mid_round(self, epoch: int, step: int, records: TrainingRecords) -> None:
        """Save the checkpoint at optimizer step ``step`` inside round ``epoch`` (always: no
        strategy decides), and drop the mid-round checkpoint before it once this one commits."""
        ...

    def restore_mid_round(self, epoch: int, step: int) -> TrainingRecords:
        """The verified records of the mid-round checkpoint at ``step`` of round ``epoch``."""
        ...

    def latest_complete_point(self) -> ResumePoint | None:
        """The newest complete checkpoint of either kind, or None."""
        ...
