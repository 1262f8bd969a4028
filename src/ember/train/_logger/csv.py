"""Metric values in one CSV file, for spreadsheets and pandas, that also answers queries.

::

    epoch,step,split,metric,value,weight,kind
    1,1,train,Loss,4.471280097961426,1,batch
    ...
    1,8,train,Loss,4.484403473990304,,epoch

One row per numeric entry. The columns:

* ``epoch``: the round (an epoch; in a step run, the validation round, as the log directories
  ``epoch-N`` count);
* ``step``: the run's global step when the value was logged (its optimizer steps so far, kept
  across resumes; a validation shares the step of the training before it, an epoch value the
  step of its split's last batch), as Lightning's ``metrics.csv`` has ``step``;
* ``split``: ``train`` or ``valid``; ``metric``: the metric's name;
* ``value``; ``weight``: the batch's weight (empty when the metric gives none, and for an
  epoch value);
* ``kind``: ``batch`` for a batch value, ``epoch`` for the epoch value written at the split end.

Numbers are written as the metric log files write them, so they read back exactly. Metrics
that log text are not written. A file written before the ``step`` column existed
(``epoch,split,metric,value,weight,kind``) is continued in its own columns and reads back as
before.

Rows are buffered and written out at every split end and at :meth:`CsvMetricLogger.close`.
:meth:`CsvMetricLogger.read_numeric` reads the file back (only the part it has not read yet),
so this logger alone can serve checkpointing, early stopping and the summary.

An existing file is continued, as a resumed run needs: when an epoch that the file already holds
is logged again (the epoch after the checkpoint a run resumed from), that split's rows from the
epoch on are dropped first, as the file logger starts a re-run epoch's files anew. A run resumed
from a mid-round checkpoint cuts the file back to the size the checkpoint recorded
(:meth:`CsvMetricLogger.resume_split`) and goes on appending.
"""

from __future__ import annotations

import csv
import io
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from ember._rundir.metric_logs import NumericEntry, format_number
from ember.train._metric.values import MetricValue
from ember.train._vocabulary import Split, as_vocabulary

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["CsvMetricLogger"]

HEADER = ("epoch", "step", "split", "metric", "value", "weight", "kind")
WITHOUT_STEP = ("epoch", "split", "metric", "value", "weight", "kind")
"""The header of files written before the ``step`` column."""

_Key = tuple[str, Split, int]


class CsvMetricLogger:
    """Appends the numeric entries of every metric to the CSV file ``path``.

    See the module docstring for the columns. ``path``'s directory is created with the first
    row; a file that exists must start with the header above.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if self.path.is_dir():
            raise ValueError(f"path is a directory, not a CSV file: {str(self.path)!r}")
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._rows: list[tuple[object, ...]] = []
        self._started: set[tuple[Split, int]] = set()
        # what has been read back: entries by (metric, split, epoch), and up to which byte
        self._index: dict[_Key, list[NumericEntry]] = {}
        self._read_up_to = 0
        self._header: tuple[str, ...] = HEADER  # an existing file's, once scanned
        # the (split, epoch) pairs an earlier run left in the file
        self._earlier = self._scan_existing()

    def start(self, config: Mapping[str, Any]) -> None:
        """Nothing to record: ``config.json`` is written by the launch."""

    def log(self, values: Sequence[MetricValue]) -> None:
        """Buffer one row per value."""
        with self._lock:
            for value in values:
                if (value.split, value.epoch) not in self._started:
                    self._start(value.split, value.epoch)
                self._rows.append(_row(value, self._header))

    def end_split(self, epoch: int, split: Split) -> None:
        """Write the buffered rows to the file."""
        with self._lock:
            self._write_rows()

    def read_numeric(self, name: str, epoch: int, split: Split | str) -> list[NumericEntry]:
        """The entries of ``name`` as the file holds them (``split``: a Split or ``"valid"``...);
        a malformed row raises ``ValueError``."""
        key = (name, as_vocabulary(Split, split, "split"), epoch)
        with self._lock:
            self._write_rows()
            self._read_new_rows()
            return list(self._index.get(key, []))

    def sync(self) -> None:
        """Write the buffered rows to the file (before a checkpoint commits)."""
        with self._lock:
            self._write_rows()

    def log_position(self, epoch: int, split: Split) -> dict[str, Any]:
        """The file's size in bytes once every buffered row is written (``ResumableLogger``):
        every row after it was logged after the checkpoint."""
        with self._lock:
            self._write_rows()
            return {"bytes": self.path.stat().st_size if self.path.exists() else 0}

    def resume_split(self, epoch: int, split: Split, position: dict[str, Any]) -> None:
        """Cut the file back to ``position``'s size and continue ``split`` of ``epoch`` in it."""
        size = position.get("bytes") if isinstance(position, dict) else None
        with self._lock:
            self._close_file()
            actual = self.path.stat().st_size if self.path.exists() else 0
            if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= actual:
                raise ValueError(
                    f"the CSV metric log {self.path} holds {actual} bytes, fewer than the "
                    f"{size!r} the checkpoint recorded: it was changed since, so the resumed "
                    "split cannot continue it"
                )
            if actual:
                os.truncate(self.path, size)
            self._index.clear()
            self._read_up_to = 0
            self._earlier = self._scan_existing() - {(split, epoch)}
            self._started.add((split, epoch))  # its rows so far are this run's

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Nothing to record: ``summary.json`` is written by the launch."""

    def close(self) -> None:
        """Write the buffered rows and close the file; calling it again does nothing."""
        with self._lock:
            self._write_rows()
            self._close_file()

    # internals ---------------------------------------------------------------------------

    def _scan_existing(self) -> set[tuple[Split, int]]:
        try:
            with self.path.open(newline="", encoding="utf-8") as file:
                rows = csv.reader(file)
                header = next(rows, None)
                if header is not None and tuple(header) not in (HEADER, WITHOUT_STEP):
                    raise ValueError(
                        f"{str(self.path)!r} is not a CSV metric log: its header is "
                        f"{','.join(header)!r}, expected {','.join(HEADER)!r}"
                    )
                self._header = HEADER if header is None else tuple(header)
                return {_parse(row, self.path)[0][1:] for row in rows if row}
        except FileNotFoundError:
            return set()

    def _write_rows(self) -> None:
        if self._rows:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", newline="", encoding="utf-8")
                if self._file.tell() == 0:
                    self._rows.insert(0, self._header)
            csv.writer(self._file, lineterminator="\n").writerows(self._rows)
            self._rows.clear()
        if self._file is not None:
            self._file.flush()

    def _close_file(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _start(self, split: Split, epoch: int) -> None:
        """First entries of ``epoch`` on ``split`` in this run: drop rows an earlier run left."""
        self._started.add((split, epoch))
        stale = {(s, e) for s, e in self._earlier if s is split and e >= epoch}
        if not stale:
            return
        self._write_rows()
        self._close_file()
        with self.path.open(newline="", encoding="utf-8") as file:
            rows = list(csv.reader(file))
        kept = [row for row in rows[1:] if row and _parse(row, self.path)[0][1:] not in stale]
        temporary = self.path.with_name(self.path.name + ".tmp")
        with temporary.open("w", newline="", encoding="utf-8") as file:
            csv.writer(file, lineterminator="\n").writerows([self._header, *kept])
        os.replace(temporary, self.path)
        self._earlier -= stale
        self._index.clear()
        self._read_up_to = 0

    def _read_new_rows(self) -> None:
        try:
            with self.path.open("rb") as file:
                file.seek(self._read_up_to)
                data = file.read()
        except FileNotFoundError:
            return
        if not data:
            return
        first_line = 1 if self._read_up_to == 0 else None
        for number, row in enumerate(_csv_rows(data), start=1):
            if number == first_line or not row:
                continue  # the header, or a blank line
            key, value = _parse(row, self.path)
            self._index.setdefault(key, []).append(value)
        self._read_up_to += len(data)


def _row(value: MetricValue, header: tuple[str, ...]) -> tuple[object, ...]:
    """The CSV row of ``value``, in the columns of ``header``."""
    weight = "" if value.weight is None or value.final else format_number(value.weight)
    kind = "epoch" if value.final else "batch"
    number = format_number(value.value)
    if header == WITHOUT_STEP:
        return (value.epoch, value.split.value, value.name, number, weight, kind)
    return (value.epoch, value.step, value.split.value, value.name, number, weight, kind)


def _csv_rows(data: bytes) -> Iterable[list[str]]:
    return csv.reader(io.StringIO(data.decode("utf-8"), newline=""))


def _parse(row: list[str], path: Path) -> tuple[_Key, NumericEntry]:
    try:
        if len(row) == len(HEADER):
            epoch, _, split, name, value, weight, kind = row
        else:
            epoch, split, name, value, weight, kind = row
        if kind == "epoch":
            entry = NumericEntry(float(value), final=True)
        elif kind == "batch":
            entry = NumericEntry(float(value), float(weight) if weight else None)
        else:
            raise ValueError(f"unknown kind {kind!r}")
        return (name, Split(split), int(epoch)), entry
    except ValueError as error:
        raise ValueError(f"{path}: malformed row {','.join(row)!r}: {error}") from None
