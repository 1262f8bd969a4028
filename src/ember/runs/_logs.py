"""A run directory's metric logs read back as rows: every batch line and every epoch value.

The file logs are the source (``docs/design.md``, "Metric logs"): ``{split}/epoch-{N}/{Name}.log``
with one ``value,weight`` line per batch and a last ``value,final`` line, and the split's
``steps.jsonl``, the global step of each line by epoch (``ember/train/_logger/file.py``). Only
complete lines are read, so a run still being written reads as far as its files got; a re-run
epoch (a resume) started its files anew and a split resumed mid-round cut them back, so no step
is read twice. A metric whose first line is not a number logs text and is left out; a later line
that is not a number is an error naming the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ember.train._logger.file import StepRuns, metric_file_name, metric_name, read_metric_log
from ember.train._logger.store import epoch_value
from ember.train._metric.base import NumericEntry
from ember.train._run_files import epoch_number, read_run_tail
from ember.train._vocabulary import Split

__all__ = [
    "SPLITS",
    "MetricRow",
    "SplitLog",
    "epoch_directories",
    "has_epoch_values",
    "read_split",
]

SPLITS = (Split.TRAIN, Split.VALID)
_EPOCH_DIR = re.compile(r"epoch-([1-9][0-9]*)")


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


def epoch_directories(directory: Path) -> dict[Split, dict[int, Path]]:
    """The ``epoch-N`` directories of each split under ``directory``, by epoch (N at most
    ``MAX_EPOCH``: RunFileError naming a directory past it)."""
    found: dict[Split, dict[int, Path]] = {}
    for split in SPLITS:
        split_dir = directory / split.value
        if not split_dir.is_dir():
            continue
        for epoch_dir in split_dir.iterdir():
            match = _EPOCH_DIR.fullmatch(epoch_dir.name)
            if match is not None and epoch_dir.is_dir():
                found.setdefault(split, {})[epoch_number(match.group(1), epoch_dir)] = epoch_dir
        if split in found:
            found[split] = dict(sorted(found[split].items()))
    return found


def has_epoch_values(epoch_dir: Path, root: Path) -> bool:
    """Whether a metric of ``epoch_dir`` (in the run ``root``) logged its epoch value (its split
    ended): read from the end of each file, not the whole file."""
    for path in epoch_dir.glob("*.log"):
        end = read_run_tail(path, root, len(b",final\n"))
        if end == b",final\n":
            return True
    return False


def read_split(
    split: Split, epoch: int, epoch_dir: Path, steps: dict[str, StepRuns], root: Path
) -> list[SplitLog]:
    """The numeric metrics logged in ``epoch_dir``, sorted by name, with the global ``steps``
    of their lines (the epoch's section of the split's steps file: :func:`read_steps`).

    A file's metric name is the one the steps file gives for it (a name holding ``_`` reads
    back as written); without one, the one its file name stands for (:func:`metric_name`: each
    ``_`` read as a space).
    """
    names = {file_name: name for name in steps if (file_name := _file_name(name)) is not None}
    logs = []
    for path in sorted(epoch_dir.glob("*.log")):
        name = names.get(path.name) or metric_name(path.name)
        entries = _numeric_entries(path, root)
        if entries is not None:
            lines = _expanded(steps.get(name, []), len(entries))
            logs.append(SplitLog(split, epoch, name, entries, lines))
    return sorted(logs, key=lambda log: log.metric)


def _expanded(runs: StepRuns, lines: int) -> tuple[int, ...]:
    """The step of each of the first ``lines`` lines (no more: the steps file is not trusted to
    claim only as many lines as the log holds)."""
    steps: list[int] = []
    for step, count in runs:
        steps += [step] * min(count, lines - len(steps))
        if len(steps) == lines:
            break
    return tuple(steps)


def _file_name(name: str) -> str | None:
    """The log file of the metric ``name`` a steps file gives; None for one that cannot have a
    file (empty, too long)."""
    try:
        return metric_file_name(name)
    except ValueError:
        return None


def _numeric_entries(path: Path, root: Path) -> tuple[NumericEntry, ...] | None:
    """The file's entries; None when its first line is not a number (a metric that logs
    text, such as ``CudaMetric``'s readings)."""
    try:
        return tuple(read_metric_log(path, root))
    except ValueError as error:
        if str(error).startswith(f"{path}:1:"):
            return None
        raise
