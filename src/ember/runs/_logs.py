"""A run directory's metric logs read back as rows: every batch line and every epoch value.

The file logs are the source (``docs/design.md``, "Metric logs"), read by
``ember/_rundir/metric_logs.py``: ``{split}/epoch-{N}/{Name}.log`` with one ``value,weight`` line
per batch and a last ``value,final`` line, and the split's ``steps.jsonl``, the global step of
each line by epoch. Only complete lines are read, so a run still being written reads as far as
its files got; a re-run epoch (a resume) started its files anew and a split resumed mid-round cut
them back, so no step is read twice. A metric whose first line is not a number logs text and is
left out; a later line that is not a number is an error naming the file and the line.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ember._rundir.metric_logs import NumericEntry, epoch_value, read_run_logs
from ember.train import Split

__all__ = ["SPLITS", "MetricRow", "SplitLog", "read_logs"]

SPLITS = (Split.TRAIN, Split.VALID)


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One number a run logged: a batch value (an *item* row, with its ``weight`` when the
    metric gives one) or the epoch value of a split (an *epoch* row, ``weight`` None).

    ``epoch`` is the round (an epoch; in a step run, the validation round, as the log
    directories ``epoch-N`` count); ``step`` the run's optimizer steps when the value was logged
    (the global step trackers plot against; a validation shares the step of the training before
    it, an epoch value the step of its split's last batch), None for logs written before ember
    kept steps.
    """

    run: str
    split: str
    epoch: int
    step: int | None
    metric: str
    value: float
    weight: float | None = None


@dataclass(frozen=True, slots=True)
class SplitLog:
    """One numeric metric's lines in one split of one epoch, with the step of each line (as far
    as the steps file says: a shorter list for a run still being written or for old logs)."""

    split: Split
    epoch: int
    metric: str
    entries: tuple[NumericEntry, ...]
    steps: tuple[int, ...]

    def step(self, index: int) -> int | None:
        """The global step of line ``index`` (0-based), or None when it is not known."""
        return self.steps[index] if index < len(self.steps) else None

    def item_rows(self, run: str) -> Iterator[MetricRow]:
        """A row per batch line (the epoch value's ``final`` line is not one)."""
        split = self.split.value
        for index, entry in enumerate(self.entries):
            if not entry.final:
                step = self.step(index)
                yield MetricRow(
                    run, split, self.epoch, step, self.metric, entry.value, entry.weight
                )

    def epoch_row(self, run: str) -> MetricRow | None:
        """The epoch value: the ``final`` line, or without one (a split still being written, or
        killed) the weighted mean of its batch lines, as training reads it; None when empty."""
        value = epoch_value(self.entries)
        if value is None:
            return None
        step = self.step(len(self.entries) - 1)
        return MetricRow(run, self.split.value, self.epoch, step, self.metric, value)


def read_logs(directory: Path) -> list[SplitLog]:
    """Every numeric metric's lines in the run ``directory``, per split and epoch, as the files
    hold them now."""
    return [
        SplitLog(Split(log.split), log.epoch, log.metric, log.entries, log.steps)
        for log in read_run_logs(directory)
    ]
