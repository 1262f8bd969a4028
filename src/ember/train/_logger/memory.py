"""Metric values kept in memory, for tests and for runs that should write no files."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember._rundir.metric_logs import NumericEntry
from ember.train._metric.values import MetricText, MetricValue
from ember.train._vocabulary import Split, as_vocabulary

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["InMemoryMetricLogger"]


class InMemoryMetricLogger:
    """Keeps every entry's text, keyed by metric, split and the real epoch number, and what the
    run gave its loggers (``config``, ``summary``, ``artifacts``).

    Keying by epoch number (not by position, as Burn does) keeps lookups right after a resume,
    when the first epoch logged is not epoch 1. Use it with ``without_file_logs()`` for a run
    that writes no metric files.
    """

    def __init__(self) -> None:
        self.values: defaultdict[tuple[str, Split, int], list[str]] = defaultdict(list)
        self.numbers: list[MetricValue] = []
        self.config: Mapping[str, Any] | None = None
        self.summary: LearnerSummary | None = None
        self.artifacts: dict[str, Path] = {}

    def start(self, config: Mapping[str, Any]) -> None:
        """Remember the configuration."""
        self.config = config

    def log(self, values: Sequence[MetricValue]) -> None:
        """Keep each value and its text."""
        self.numbers.extend(values)
        for value in values:
            self.values[(value.name, value.split, value.epoch)].append(value.line)

    def log_text(self, texts: Sequence[MetricText]) -> None:
        """Keep the text of each entry."""
        for text in texts:
            self.values[(text.name, text.split, text.epoch)].append(text.text)

    def end_split(self, epoch: int, split: Split) -> None:
        """Nothing to flush."""

    def read_numeric(self, name: str, epoch: int, split: Split | str) -> list[NumericEntry]:
        """The parsed entries (``split``: a Split or ``"valid"``...); lines that are not numeric
        raise ``ValueError``."""
        key = (name, as_vocabulary(Split, split, "split"), epoch)
        return [NumericEntry.parse(text) for text in self.values.get(key, [])]

    def log_position(self, epoch: int, split: Split) -> dict[str, Any]:
        """How many lines each metric of ``split`` in ``epoch`` holds, and how many values were
        logged in all (``ResumableLogger``)."""
        lines = {
            name: len(texts)
            for (name, s, e), texts in self.values.items()
            if (s, e) == (split, epoch)
        }
        return {"lines": lines, "numbers": len(self.numbers)}

    def resume_split(self, epoch: int, split: Split, position: dict[str, Any]) -> None:
        """Drop the split's lines and the values kept after ``position`` (a logger given to the
        resumed launch again); a fresh logger holds nothing to drop."""
        lines, numbers = position.get("lines", {}), position.get("numbers", 0)
        for key in [key for key in self.values if (key[1], key[2]) == (split, epoch)]:
            del self.values[key][lines.get(key[0], 0) :]
        del self.numbers[numbers:]

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Remember the summary and the artifacts."""
        self.summary = summary
        self.artifacts = dict(artifacts)

    def close(self) -> None:
        """Nothing to release."""
