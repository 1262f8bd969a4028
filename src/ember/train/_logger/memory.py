"""Metric values kept in memory, for tests and for runs that should write no files."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ember.train._metric.base import MetricDefinition, MetricEntry, NumericEntry
from ember.train._vocabulary import Split

__all__ = ["InMemoryMetricLogger"]


class InMemoryMetricLogger:
    """Keeps every serialized entry, keyed by metric, split and the real epoch number.

    Keying by epoch number (not by position, as Burn does) keeps lookups right after a resume,
    when the first epoch logged is not epoch 1.
    """

    def __init__(self) -> None:
        self.values: defaultdict[tuple[str, Split, int], list[str]] = defaultdict(list)
        self.definitions: list[MetricDefinition] = []

    def log_definition(self, definition: MetricDefinition) -> None:
        """Remember the definition."""
        self.definitions.append(definition)

    def log(self, entries: Sequence[MetricEntry], epoch: int, split: Split) -> None:
        """Keep the serialized text of each available entry."""
        for entry in entries:
            if entry.is_available:
                self.values[(entry.name, split, epoch)].append(entry.serialized)

    def end_split(self, epoch: int, split: Split) -> None:
        """Nothing to flush."""

    def read_numeric(self, name: str, epoch: int, split: Split) -> list[NumericEntry]:
        """The parsed entries; lines that are not numeric raise ``ValueError``."""
        return [NumericEntry.parse(text) for text in self.values.get((name, split, epoch), [])]

    def close(self) -> None:
        """Nothing to release."""
