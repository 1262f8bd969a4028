"""``FileMetricLogger``: metric logs as text files, one per metric, split and epoch (Burn's
layout), and each split's ``steps.jsonl``.

The files' layout, lines and names are the run directory's format (``ember/_rundir/metric_logs.py``
and ``ember/_rundir/steps.py``, where they are read back too); this module writes them. With
``flat=True`` the files are ``{directory}/{Name}.log`` (no split or epoch directory: an
evaluation's logger for the test ``t`` is ``flat`` in ``{run}/test/t``, as Burn's
``FileMetricLogger::new_eval``). A re-run epoch (after a resume) starts its files anew; a split
resumed from a mid-round checkpoint is cut back to the sizes the checkpoint recorded and
continued (:meth:`FileMetricLogger.resume_split`).

Creating a directory and a file per metric and epoch takes from tens of microseconds to over a
millisecond on a busy disk, more than a small model's whole epoch; so the files are written by a
process of its own (``metric-writer``, ``metric_writer.py``; Burn's ``AsyncLogger`` uses a thread,
whose every system call would hand the GIL over and back here): training waits for the disk only
when the pipe to it is full (a MiB on Linux). Lines are handed to it in blocks, at least every
``interval`` seconds, so a file is at most that far behind training, and the writer opens, appends
and closes each file per block (no file stays open); a steps file's lines go with a block at most
once an interval (short epochs would append to it at each split's start and end). A new metric file
is handed over with its first line: its directory and the file are made while training goes on, not
all at the end of the run (holding short epochs' new files back to hand them over together measured
no faster: the last ones are then made after training instead of beside it). Reading a value back
and closing first write everything logged before them; a write error is raised by the next of those
calls or by the next ``log`` once the writer has reported it (so a logger that cannot write stops
training at once, like any error of the metrics thread).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember._checks import check_real
from ember._rundir.metric_logs import (
    NumericEntry,
    epoch_directory,
    metric_file_name,
    read_metric_log,
)
from ember._rundir.steps import STEPS_FILE, SplitSteps, cut_steps, epoch_line
from ember.train._logger.blocks import Block
from ember.train._logger.metric_writer import WRITER_TIMEOUT, MetricFileWriter
from ember.train._metric.values import MetricText, MetricValue
from ember.train._vocabulary import Split, as_vocabulary

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["FileMetricLogger"]


def _cut_back(path: str, size: object) -> bool:
    """Cut the log ``path`` back to ``size``, the bytes a checkpoint recorded; whether the file
    exists. A file shorter than that was changed since: refused, naming it."""
    actual = os.path.getsize(path) if os.path.isfile(path) else None
    if not isinstance(size, int) or not 0 <= size <= (actual or 0):
        raise ValueError(
            f"the metric log {path} holds {actual or 0} bytes, fewer than the {size!r} the "
            "checkpoint recorded: it was changed since, so the resumed split cannot continue it"
        )
    if actual is not None:
        os.truncate(path, size)
    return actual is not None


class FileMetricLogger:
    """Writes metric entries under ``directory``; see the module docstring for the layout.

    ``writer_timeout``: the seconds training waits at most for the metric-writer to take a
    block, answer a sync or end (120 by default, at most 10**6); one that has not answered by
    then is killed and the run ends with a ``TimeoutError`` naming it (``docs/training.md``,
    "The loop")."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        flat: bool = False,
        writer_timeout: float = WRITER_TIMEOUT,
    ) -> None:
        self.directory = Path(directory)
        self.flat = flat
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"metric log directory is a file: {str(self.directory)!r}")
        self._root = str(self.directory)
        timeout = check_real(  # at most what poll() takes (24 days)
            "writer_timeout", writer_timeout, minimum=0.0, strict=True, maximum=1e6
        )
        # a process of its own (metric_writer.py)
        self._writer = MetricFileWriter(self._root, timeout=timeout)
        # the open metric files by (metric name, epoch, split)
        self._paths: dict[tuple[str | None, int, Split], str] = {}
        self._steps: dict[tuple[int, Split], SplitSteps] = {}
        self._step_files: set[str] = set()  # the splits' steps files, cut back once: appended
        self._step_lines: dict[str, list[str]] = {}  # made, handed over once due (interval)
        self._pending: dict[str, list[str]] = {}
        self._started: set[str] = set()
        self._continued: set[str] = set()  # files of a resumed split: appended to, not new
        self._ended: list[str] = []  # paths of ended splits, forgotten after the next block
        self._new_file = False  # a file not handed to the writer yet: hand it over now
        self._interval = interval
        self._clock = clock
        self._last_hand_off = self._last_steps = clock()

    def path(self, name: str, epoch: int, split: Split | str) -> Path:
        """Where ``name``'s values for ``epoch`` and ``split`` (``"valid"`` too) are written."""
        return Path(self._file(name, epoch, as_vocabulary(Split, split, "split")))

    def _file(self, name: str | None, epoch: int, split: Split) -> str:
        # joined as text: making a Path costs more than a small model's epoch spends on its files
        if name is None:  # the split's steps file
            return os.path.join(self._root, split.value, STEPS_FILE)
        if self.flat:
            return os.path.join(self._root, metric_file_name(name))
        return os.path.join(self._root, split.value, epoch_directory(epoch), metric_file_name(name))

    def start(self, config: Mapping[str, Any]) -> None:
        """Nothing to record: ``config.json`` is written by the launch."""

    def log(self, values: Sequence[MetricValue]) -> None:
        """Queue one line per value (the text the metric serialized); raise the error of an
        earlier failed write (a read-only or full disk), which stops training at the metrics
        thread's next chunk."""
        self._writer.raise_pending()
        for value in values:
            self._queue(value.name, value.epoch, value.split, value.line)
        if not self.flat:
            self._count_steps(values)
        self._maybe_hand_off()

    def _count_steps(self, values: Sequence[MetricValue]) -> None:
        """Count each value's line at its step, per split and epoch (the store logs one split
        and epoch per call: one run of values)."""
        start, count = 0, len(values)
        while start < count:
            epoch, split = values[start].epoch, values[start].split
            end = start + 1
            while end < count and values[end].epoch == epoch and values[end].split is split:
                end += 1
            runs = self._steps.get((epoch, split))
            if runs is None:  # the split starts: its section of the steps file
                runs = self._steps[(epoch, split)] = SplitSteps()
                self._start_steps(epoch, split)
            runs.add(values[start:end])
            start = end

    def _start_steps(self, epoch: int, split: Split) -> None:
        """Begin ``epoch``'s section of the split's steps file; the first time this logger
        writes that file, cut it back to before that epoch (a re-run epoch starts anew)."""
        path = self._file(None, epoch, split)
        if path not in self._step_files:
            cut_steps(path, epoch)
            self._step_files.add(path)
        self._step_lines.setdefault(path, []).append(epoch_line(epoch))

    def log_text(self, texts: Sequence[MetricText]) -> None:
        """Queue one line per text entry (raising an earlier write's error, as :meth:`log`)."""
        self._writer.raise_pending()
        for text in texts:
            self._queue(text.name, text.epoch, text.split, text.text)
        self._maybe_hand_off()

    def _queue(self, name: str | None, epoch: int, split: Split, line: str) -> None:
        self._pending[self._open(name, epoch, split)].append(line)

    def _open(self, name: str | None, epoch: int, split: Split) -> str:
        """The path of ``name``'s file in the split, handed over anew with the next block when
        the split starts (again, after a resume) in this logger, unless it was resumed."""
        key = (name, epoch, split)
        path = self._paths.get(key)
        if path is None:
            path = self._paths[key] = self._file(name, epoch, split)
            self._pending[path] = []
            if path in self._continued:  # a split resumed mid-way: its file goes on
                self._continued.discard(path)
                self._started.add(path)
            else:
                self._started.discard(path)
                self._new_file = True
        return path

    def _maybe_hand_off(self) -> None:
        now = self._clock()
        if self._new_file or now - self._last_hand_off >= self._interval:
            # a steps file is appended to at most once an interval (short epochs would
            # append to it at every split's start and end)
            self._hand_off(steps=now - self._last_steps >= self._interval)

    def end_split(self, epoch: int, split: Split) -> None:
        """Forget the split's paths; its lines reach the disk with the next block, after which
        nothing of the split is kept (memory stays flat over any number of epochs)."""
        runs = self._steps.pop((epoch, split), None)
        if runs is not None:
            runs.close_step()
            self._step_lines.setdefault(self._file(None, epoch, split), []).extend(runs.take())
        for key in [key for key in self._paths if key[1] == epoch and key[2] is split]:
            self._ended.append(self._paths.pop(key))

    def read_numeric(self, name: str, epoch: int, split: Split | str) -> list[NumericEntry]:
        """Parse the file of ``name`` (``split``: a Split or ``"valid"``...); a malformed line
        raises ``ValueError`` naming the file."""
        self._hand_off()
        self._writer.flush()
        path = self._file(name, epoch, as_vocabulary(Split, split, "split"))
        return read_metric_log(path, None)  # its own logs: links followed, as when written

    def sync(self) -> None:
        """Write every line logged so far to disk, raising a failed write's error (before a
        checkpoint commits: a resume from it must find those lines)."""
        self._hand_off()
        self._writer.flush()

    def log_position(self, epoch: int, split: Split) -> dict[str, Any]:
        """The size in bytes of each file of ``split`` in ``epoch``, after writing out every
        line logged so far (``ResumableLogger``)."""
        self.sync()
        directory = os.path.dirname(self._file("-", epoch, split))
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            entries = []
        sizes = {entry.name: entry.stat().st_size for entry in entries if entry.is_file()}
        position: dict[str, Any] = {"sizes": dict(sorted(sizes.items()))}
        runs = self._steps.get((epoch, split))
        if runs is not None:  # the split's section so far, and the open step's counts
            position["steps_size"] = os.path.getsize(self._file(None, epoch, split))
            position["steps"] = runs.state()
        return position

    def resume_split(self, epoch: int, split: Split, position: dict[str, Any]) -> None:
        """Cut each file of ``split`` in ``epoch`` back to its size in ``position``, remove the
        files it does not list (begun after it), and append to them from there."""
        sizes = position.get("sizes") if isinstance(position, dict) else None
        if not isinstance(sizes, dict):
            raise ValueError(f"a file-log position holds {{'sizes': ...}}, got {position!r}")
        directory = os.path.dirname(self._file("-", epoch, split))
        present = set(os.listdir(directory)) if os.path.isdir(directory) else set()
        for name, size in sizes.items():
            path = os.path.join(directory, name)
            if _cut_back(path, size):
                self._continued.add(path)
        for name in present - set(sizes):
            os.unlink(os.path.join(directory, name))  # a file begun after the checkpoint
        steps_size = position.get("steps_size")
        if not self.flat and steps_size is not None:  # the split's steps go on (a position of
            path = self._file(None, epoch, split)  # an older ember has none: a new section)
            _cut_back(path, steps_size)
            self._step_files.add(path)
            self._steps[(epoch, split)] = SplitSteps(position.get("steps"))

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Nothing to record: ``summary.json`` is written by the launch."""

    def close(self) -> None:
        """Write everything, stop the writer thread; raise a pending write error."""
        try:
            for runs in self._steps.values():  # splits that did not end (an error)
                runs.close_step()
            self._hand_off()
            self._writer.flush()
        finally:  # the thread stops even when a write failed
            self._writer.close()

    def _hand_off(self, *, steps: bool = True) -> None:
        """Hand every line logged so far to the writer (the steps files' too, unless
        ``steps`` is False: they wait for the next hand-off that is due)."""
        self._last_hand_off = self._clock()
        self._new_file = False
        blocks: list[Block] = []
        for path, lines in self._pending.items():
            if lines:
                blocks.append((path, "\n".join(lines) + "\n", path not in self._started))
                self._started.add(path)
        if steps:
            self._last_steps = self._last_hand_off
            for (epoch, split), runs in self._steps.items():  # the steps that are over
                self._step_lines.setdefault(self._file(None, epoch, split), []).extend(runs.take())
            blocks.extend(
                (path, "\n".join(lines) + "\n", False)
                for path, lines in self._step_lines.items()
                if lines
            )
            self._step_lines = {}
        self._pending = {path: [] for path in self._paths.values()}
        self._started.difference_update(self._ended)  # ended splits: their last block is out
        self._ended.clear()
        if blocks:
            self._writer.write(blocks)
