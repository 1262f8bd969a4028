"""Metric logs as text files, one per metric, split and epoch (Burn's layout).

``{directory}/{train|valid}/epoch-{N}/{Name}.log`` where ``Name`` is the metric name with
spaces replaced by ``_``; with ``flat=True`` the files are ``{directory}/{Name}.log`` (no split or
epoch directory: an evaluation's logger for the test ``t`` is ``flat`` in ``{run}/test/t``, as
Burn's ``FileMetricLogger::new_eval``). A numeric metric writes one ``value,weight`` line per
batch and a last ``value,final`` line with the epoch value. A re-run epoch (after a resume)
starts its files anew; a split resumed from a mid-round checkpoint is cut back to the sizes the
checkpoint recorded and continued (:meth:`FileMetricLogger.resume_split`).

Creating a directory and a file per metric and epoch takes from tens of microseconds to over a
millisecond on a busy disk, more than a small model's whole epoch; so the files are written on a
thread of their own (``metric-writer``, as Burn's ``AsyncLogger``) and the metrics thread never
waits for the disk. Lines are handed to it in blocks, at least every ``interval`` seconds, so a
file is at most that far behind training, and the writer opens, appends and closes each file
per block (no file stays open). A new file is handed over with its first line: its directory
and the file are made while training goes on, not all at the end of the run. Reading a value
back and closing first write everything logged before them; a write error is raised by the
next of those calls or by the next ``log`` (so a logger that cannot write stops training at
once, like any error of the metrics thread).
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from ember.train._logger.base import MetricText, MetricValue
from ember.train._metric.base import NumericEntry
from ember.train._vocabulary import Split, as_vocabulary

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["FileMetricLogger", "metric_file_name"]


def metric_file_name(name: str) -> str:
    """The file name a metric's values are logged under."""
    return name.replace(" ", "_") + ".log"


class _Writer:
    """Writes blocks of lines on its own thread; :meth:`sync` waits for what was queued."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def write(self, blocks: list[tuple[str, str, bool]]) -> None:
        """Queue ``(path, text, truncate)`` blocks: ``truncate`` starts the file anew."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="metric-writer", daemon=True)
            self._thread.start()
        self._queue.put(("write", blocks))

    def sync(self) -> None:
        if self._thread is not None:
            done = threading.Event()
            self._queue.put(("sync", done))
            done.wait()
        self.raise_pending()

    def raise_pending(self) -> None:
        """Raise the error of a failed write, once."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(("stop", None))
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            command, argument = self._queue.get()
            if command == "stop":
                return
            if command == "sync":
                cast(threading.Event, argument).set()
                continue
            for path, text, truncate in cast(list[tuple[str, str, bool]], argument):
                try:
                    self._append(path, text, truncate)
                except Exception as error:  # raised on the logger's next call
                    self.error = self.error or error

    def _append(self, path: str, text: str, truncate: bool) -> None:
        # os-level calls, the directory made before a new file (a new epoch's directory is new
        # too): every system call here hands the GIL to the training thread and must win it
        # back, and Python's open() and makedirs() make twice as many calls
        if truncate:
            directory = os.path.dirname(path)
            try:
                os.mkdir(directory)
            except FileExistsError:
                pass
            except FileNotFoundError:  # the split's own directory is new too
                os.makedirs(directory, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_APPEND)
        data = memoryview(text.encode("utf-8"))
        fd = os.open(path, flags, 0o666)
        try:
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)


class FileMetricLogger:
    """Writes metric entries under ``directory``; see the module docstring for the layout."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        interval: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        flat: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.flat = flat
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"metric log directory is a file: {str(self.directory)!r}")
        self._root = str(self.directory)
        self._writer = _Writer()
        self._paths: dict[tuple[str, int, Split], str] = {}
        self._pending: dict[str, list[str]] = {}
        self._started: set[str] = set()
        self._continued: set[str] = set()  # files of a resumed split: appended to, not new
        self._ended: list[str] = []  # paths of ended splits, forgotten after the next block
        self._new_file = False  # a file not handed to the writer yet: hand it over now
        self._interval = interval
        self._clock = clock
        self._last_hand_off = clock()

    def path(self, name: str, epoch: int, split: Split | str) -> Path:
        """Where ``name``'s values for ``epoch`` and ``split`` (``"valid"`` too) are written."""
        return Path(self._file(name, epoch, as_vocabulary(Split, split, "split")))

    def _file(self, name: str, epoch: int, split: Split) -> str:
        # joined as text: making a Path costs more than a small model's epoch spends on its files
        if self.flat:
            return os.path.join(self._root, metric_file_name(name))
        return os.path.join(self._root, split.value, f"epoch-{epoch}", metric_file_name(name))

    def start(self, config: Mapping[str, Any]) -> None:
        """Nothing to record: ``config.json`` is written by the launch."""

    def log(self, values: Sequence[MetricValue]) -> None:
        """Queue one line per value (the text the metric serialized); raise the error of an
        earlier failed write (a read-only or full disk), which stops training at the metrics
        thread's next chunk."""
        self._writer.raise_pending()
        for value in values:
            self._queue(value.name, value.epoch, value.split, value.line)
        self._maybe_hand_off()

    def log_text(self, texts: Sequence[MetricText]) -> None:
        """Queue one line per text entry (raising an earlier write's error, as :meth:`log`)."""
        self._writer.raise_pending()
        for text in texts:
            self._queue(text.name, text.epoch, text.split, text.text)
        self._maybe_hand_off()

    def _queue(self, name: str, epoch: int, split: Split, line: str) -> None:
        key = (name, epoch, split)
        path = self._paths.get(key)
        if path is None:  # the split starts (again, after a resume): a new file
            path = self._paths[key] = self._file(name, epoch, split)
            self._pending[path] = []
            if path in self._continued:  # a split resumed mid-way: its file goes on
                self._continued.discard(path)
                self._started.add(path)
            else:
                self._started.discard(path)
                self._new_file = True
        self._pending[path].append(line)

    def _maybe_hand_off(self) -> None:
        if self._new_file or self._clock() - self._last_hand_off >= self._interval:
            self._hand_off()

    def end_split(self, epoch: int, split: Split) -> None:
        """Forget the split's paths; its lines reach the disk with the next block, after which
        nothing of the split is kept (memory stays flat over any number of epochs)."""
        for key in [key for key in self._paths if key[1] == epoch and key[2] is split]:
            self._ended.append(self._paths.pop(key))

    def read_numeric(self, name: str, epoch: int, split: Split | str) -> list[NumericEntry]:
        """Parse the file of ``name`` (``split``: a Split or ``"valid"``...); a malformed line
        raises ``ValueError`` naming the file."""
        self._hand_off()
        self._writer.sync()
        path = self.path(name, epoch, split)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        entries = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entries.append(NumericEntry.parse(line))
            except ValueError as error:
                raise ValueError(f"{path}:{number}: {error}") from None
        return entries

    def sync(self) -> None:
        """Write every line logged so far to disk, raising a failed write's error (before a
        checkpoint commits: a resume from it must find those lines)."""
        self._hand_off()
        self._writer.sync()

    def log_position(self, epoch: int, split: Split) -> dict[str, Any]:
        """The size in bytes of each file of ``split`` in ``epoch``, after writing out every
        line logged so far (``ResumableLogger``)."""
        self.sync()
        directory = os.path.dirname(self._file("-", epoch, split))
        try:
            entries = list(os.scandir(directory))
        except FileNotFoundError:
            return {"sizes": {}}
        sizes = {entry.name: entry.stat().st_size for entry in entries if entry.is_file()}
        return {"sizes": dict(sorted(sizes.items()))}

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
            actual = os.path.getsize(path) if name in present else 0
            if not isinstance(size, int) or not 0 <= size <= actual:
                raise ValueError(
                    f"the metric log {path} holds {actual} bytes, fewer than the {size!r} the "
                    "checkpoint recorded: it was changed since, so the resumed split cannot "
                    "continue it"
                )
            if name in present:
                os.truncate(path, size)
                self._continued.add(path)
        for name in present - set(sizes):
            os.unlink(os.path.join(directory, name))  # a file begun after the checkpoint

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Nothing to record: ``summary.json`` is written by the launch."""

    def close(self) -> None:
        """Write everything, stop the writer thread; raise a pending write error."""
        try:
            self._hand_off()
            self._writer.sync()
        finally:  # the thread stops even when a write failed
            self._writer.stop()

    def _hand_off(self) -> None:
        self._last_hand_off = self._clock()
        self._new_file = False
        blocks = []
        for path, lines in self._pending.items():
            if lines:
                blocks.append((path, "\n".join(lines) + "\n", path not in self._started))
                self._started.add(path)
        self._pending = {path: [] for path in self._paths.values()}
        self._started.difference_update(self._ended)  # ended splits: their last block is out
        self._ended.clear()
        if blocks:
            self._writer.write(blocks)
