"""The metric-logger protocol: where metric entries go, and how numbers are read back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ember.train._metric.base import MetricDefinition, MetricEntry, NumericEntry
from ember.train._vocabulary import Split

__all__ = ["MetricLogger"]


@runtime_checkable
class MetricLogger(Protocol):
    """Receives metric entries on the metrics thread and reads numeric values back.

    Calls for one split arrive in order: ``log`` for each batch of ``epoch``, then
    ``end_split``. ``read_numeric`` may be called from the training thread after the
    processor has been flushed.
    """

    def log_definition(self, definition: MetricDefinition) -> None:
        """A metric was registered."""
        ...

    def log(self, entries: Sequence[MetricEntry], epoch: int, split: Split) -> None:
        """Record the entries of one batch, or the epoch entries at the split end."""
        ...

    def end_split(self, epoch: int, split: Split) -> None:
        """The split of ``epoch`` ended: make everything logged for it durable."""
        ...

    def read_numeric(self, name: str, epoch: int, split: Split) -> list[NumericEntry]:
        """The numeric entries of ``name`` for ``epoch`` and ``split``; [] when none."""
        ...

    def close(self) -> None:
        """Flush and release files; called once when training ends, also on error."""
        ...
