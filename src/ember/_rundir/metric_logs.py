"""Metric logs: text files, one per numeric metric, split and epoch (Burn's layout), their lines
and how they are read back.

``{run}/{train|valid}/epoch-{N}/{Name}.log`` where ``Name`` is the metric name with spaces
replaced by ``_`` (and what would make it a path escaped: :func:`metric_file_name`); an
evaluation's logs are flat, ``{run}/test/{test}/{Name}.log``. A numeric metric writes one line per
batch, ``value`` or ``value,weight``, and a last ``value,final`` line with the epoch value
(:class:`NumericEntry`; numbers as Burn writes them, :func:`format_number`). The epoch value of a
split is that ``final`` line, or without one (a split still being written, or killed) the
weighted mean of its batch lines (:func:`epoch_value`; ``docs/design.md``, "Epoch values"). Each
split's ``steps.jsonl`` says at which global step each line was logged (``steps.py``).

The writer is ``FileMetricLogger`` (``ember/train/_logger/file.py``); a launch reading its own
logs back, the run readers (``ember.runs``) and the ``curves`` artifact read them here: complete
lines only, so a run still being written reads as far as its files got, under the run readers'
guards (``guards.py``). :func:`read_run_logs` reads every numeric metric of a run with the steps
of its lines; a metric whose first line is not a number logs text and is left out.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ember._frozen import set_field
from ember._rundir.guards import epoch_number, read_run_lines, read_run_tail
from ember._rundir.steps import StepRuns, read_steps

__all__ = [
    "SPLITS",
    "MetricLog",
    "NumericEntry",
    "epoch_directories",
    "epoch_directory",
    "epoch_value",
    "format_number",
    "has_epoch_values",
    "metric_file_name",
    "metric_name",
    "read_metric_log",
    "read_run_logs",
]

SPLITS = ("train", "valid")
"""The split directories of a training run's metric logs, in the order they are read."""

_EPOCH_DIRECTORY = re.compile(r"epoch-([1-9][0-9]*)")
_ESCAPED = re.compile(r"[/\\\0]|%(?=[0-9A-Fa-f]{2})")  # what a metric's file name escapes
_ESCAPE = re.compile(r"%([0-9A-F]{2})")
_MAX_FILE_NAME = 255  # bytes: NAME_MAX of Linux and macOS file systems


def format_number(value: float) -> str:
    """The shortest text that reads back as ``value``, never in exponent form (``1.0`` -> ``1``).

    This is how Burn writes numbers to metric logs (Rust's ``f64`` display), so logs written by
    ember and by Burn look alike and parse back exactly.
    """
    if type(value) is int:  # a batch's weight: its items
        return str(value)
    text = repr(value)
    if "e" in text or "n" in text:  # exponent form, nan or inf: rare, take the slow path
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        import numpy as np  # lazy: keeps `import ember` fast ("light import")

        return str(np.format_float_positional(value, unique=True, trim="-"))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True, slots=True, init=False)
class NumericEntry:
    """A number in a metric log: a plain value, a value with its weight, or an epoch value.

    Serialized as ``value``, ``value,weight`` or ``value,final`` (``docs/design.md``).
    """

    value: float
    weight: float | None = None
    final: bool = False

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self, value: float, weight: float | None = None, final: bool = False
    ) -> None:
        set_field(self, "value", value)
        set_field(self, "weight", weight)
        set_field(self, "final", final)

    def serialize(self) -> str:
        """The log-file text of this entry."""
        if self.final:
            return f"{format_number(self.value)},final"
        if self.weight is not None:
            return f"{format_number(self.value)},{format_number(self.weight)}"
        return format_number(self.value)

    @classmethod
    def parse(cls, text: str) -> NumericEntry:
        """Read back one log line; a malformed line raises ``ValueError`` quoting it."""
        parts = text.strip().split(",")
        try:
            if len(parts) == 1:
                return cls(float(parts[0]))
            if len(parts) == 2:
                if parts[1] == "final":
                    return cls(float(parts[0]), final=True)
                return cls(float(parts[0]), weight=float(parts[1]))
        except ValueError:
            pass
        raise ValueError(f"not a numeric metric entry: {text!r}")


def epoch_value(entries: Sequence[NumericEntry]) -> float | None:
    """One epoch's value: its ``final`` entry, else the weighted mean of its batch entries."""
    if not entries:
        return None
    if entries[-1].final:
        return entries[-1].value
    total = weights = 0.0
    for entry in entries:
        weight = 1.0 if entry.weight is None else entry.weight
        total += entry.value * weight
        weights += weight
    return total / weights if weights else math.nan


def metric_file_name(name: str) -> str:
    """The file name a metric's values are logged under: ``{Name}.log``, the name with spaces
    as ``_`` (Burn's) and ``/``, ``\\``, NUL and a ``%`` before two hex digits as ``%XX``, so
    that a name is never a path (``../../X`` stays in its directory, as ``..%2F..%2FX.log``) and
    reads back as written (:func:`metric_name`); every other name keeps Burn's file name.
    ValueError for an empty name or one whose file name is over 255 bytes (what file systems
    hold)."""
    if not name:
        raise ValueError("a metric name must not be empty: it names the metric's log file")
    stem = name
    if _ESCAPED.search(stem) is not None:  # rare: the common names cost no substitution
        stem = _ESCAPED.sub(lambda found: f"%{ord(found.group()):02X}", stem)
    file_name = stem.replace(" ", "_") + ".log"
    size = len(file_name.encode("utf-8", "surrogatepass"))
    if size > _MAX_FILE_NAME:
        raise ValueError(
            f"the metric name {name[:40]!r}... is too long: its log file's name would be "
            f"{size} bytes, more than the {_MAX_FILE_NAME} a file system holds; give the metric "
            "a shorter name"
        )
    return file_name


def metric_name(file_name: str) -> str:
    """The metric name a log file's name stands for, where no steps file names it: the
    reverse of :func:`metric_file_name`, with each ``_`` read as a space (a name holding ``_``
    reads back as written only from the steps file)."""
    stem = file_name.removesuffix(".log").replace("_", " ")
    return _ESCAPE.sub(lambda found: chr(int(found.group(1), 16)), stem)


def epoch_directory(epoch: int) -> str:
    """``epoch-{N}``: the directory of a split's logs of ``epoch``."""
    return f"epoch-{epoch}"


def read_metric_log(
    path: str | os.PathLike[str], root: str | os.PathLike[str] | None
) -> list[NumericEntry]:
    """The entries of one numeric metric log of the run in ``root`` (complete lines only, read
    under the run readers' guards: ``guards.py``; ``root`` None: this process's own logs); a line
    that is not a numeric entry raises ``ValueError`` naming the file and the line."""
    entries = []
    for number, line in enumerate(read_run_lines(path, root), start=1):
        if not line.strip():
            continue
        try:
            entries.append(NumericEntry.parse(line))
        except ValueError as error:
            raise ValueError(f"{path}:{number}: {error}") from None
    return entries


def epoch_directories(directory: Path) -> dict[str, dict[int, Path]]:
    """The ``epoch-N`` directories of each split under ``directory``, by split name and epoch
    (N at most ``MAX_EPOCH``: RunFileError naming a directory past it)."""
    found: dict[str, dict[int, Path]] = {}
    for split in SPLITS:
        split_dir = directory / split
        if not split_dir.is_dir():
            continue
        for epoch_dir in split_dir.iterdir():
            match = _EPOCH_DIRECTORY.fullmatch(epoch_dir.name)
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


@dataclass(frozen=True, slots=True)
class MetricLog:
    """One numeric metric's lines in one split (its name) of one epoch, with the global step of
    each line (as far as the steps file says: a shorter tuple for a run still being written or
    for old logs)."""

    split: str
    epoch: int
    metric: str
    entries: tuple[NumericEntry, ...]
    steps: tuple[int, ...]


def read_run_logs(directory: Path) -> Iterator[MetricLog]:
    """Every numeric metric's lines in the run ``directory``, by split, epoch and metric name,
    as its files hold them now.

    A file's metric name is the one the split's steps file gives for it (a name holding ``_``
    reads back as written); without one, the one its file name stands for (:func:`metric_name`:
    each ``_`` read as a space).
    """
    for split, epochs in epoch_directories(directory).items():
        steps = read_steps(directory / split, directory)
        for epoch, epoch_dir in epochs.items():
            yield from _read_split(split, epoch, epoch_dir, steps.get(epoch, {}), directory)


def _read_split(
    split: str, epoch: int, epoch_dir: Path, steps: dict[str, StepRuns], root: Path
) -> list[MetricLog]:
    """The numeric metrics logged in ``epoch_dir``, sorted by name, with the global ``steps``
    of their lines (the epoch's section of the split's steps file)."""
    names = {file_name: name for name in steps if (file_name := _file_name(name)) is not None}
    logs = []
    for path in sorted(epoch_dir.glob("*.log")):
        name = names.get(path.name) or metric_name(path.name)
        entries = _numeric_entries(path, root)
        if entries is not None:
            lines = _expanded(steps.get(name, []), len(entries))
            logs.append(MetricLog(split, epoch, name, entries, lines))
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
