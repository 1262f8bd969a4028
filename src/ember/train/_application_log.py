"""The application log, ``experiment.log``: what ember's loggers say during a run, every attempt.

Records of the ``ember`` loggers at INFO and above are appended to the file (it accumulates
across runs and attempts, as Burn's does: never truncated). Lines are flushed to the file at
most once a second, and at once for warnings and errors: flushing after every line would cost a
small model a few percent of its speed; a line is never left unflushed for longer than that
second (a timer flushes it), so a process killed outright (SIGKILL) loses at most its last
second. The handler is removed, and the file flushed and closed, when the run ends. A file that
cannot be written (a full disk) never stops training: the first write error is kept and the run
reports it in its result when it ends.

**Attempts.** A training launch is an *attempt* of its run (torchrun restarts a job after a lost
rank; a scheduler requeues it after a preemption; a person resumes it). Each attempt's lines
start with one line naming it, where it resumed from and how the attempt before it ended, and
end with a line saying it ended (and the error, if it failed)::

    ... INFO ember.train: Attempt of pid 4242 on node0 (torchrun restart 1 of at most 2): resumes
        from step 10 (in epoch 2); the attempt before it did not end (killed, or its machine
        lost), its last line: "... INFO ember.train: Iterations 1-4 of epoch 3 (train)"
    ...
    ... INFO ember.train: Attempt of pid 4242 ended: training failed (DistributedError: ...)

So a run directory tells the whole story of a run that was restarted. The records logged
before the attempt's resume point is known (warnings about skipped checkpoints) are held and
written after its first line.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["ExperimentLogHandler", "begin_attempt", "experiment_log", "warnings_to"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_LOGGER = "ember.train"  # the attempt lines' logger
_ENDED = re.compile(r" INFO ember\.train: Attempt of pid \d+ ended(?:: (.*))?$")
_TAIL = 64 * 1024  # the bytes of an earlier log read for its last line


class _Formatter(logging.Formatter):
    """The usual format, with the date and time text made once a second, not once a line."""

    def __init__(self) -> None:
        super().__init__(_FORMAT)
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802  # logging's name
        second = int(record.created)
        if second != self._second:
            self._second = second
            self._text = time.strftime(self.default_time_format, self.converter(record.created))
        return f"{self._text},{int(record.msecs):03d}"


class ExperimentLogHandler(logging.FileHandler):
    """A file handler that flushes at most every ``interval`` seconds, and on warnings.

    With ``deferred`` a line written between two flushes is flushed by a timer ``interval``
    after the last flush (never later), instead of waiting for the next line. With ``attempt``
    the file is a run's log (see the module doc): the records wait for :meth:`begin` to write
    the attempt's first line, and :meth:`close` writes its last.
    """

    def __init__(
        self,
        path: Path,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        deferred: bool = True,
        attempt: bool = False,
    ) -> None:
        self.before = _last_line(path) if attempt else None
        """The last line the file had before this handler opened it ("" when it had none)."""
        super().__init__(path, encoding="utf-8")
        self.setLevel(logging.INFO)
        self.setFormatter(_Formatter())
        self._interval = interval
        self._clock = clock
        self._last_flush = clock()
        self._deferred = deferred
        self._timer: threading.Timer | None = None
        self._opened = time.time()
        self._held: list[logging.LogRecord] | None = [] if attempt else None
        self._attempt = attempt
        self._failure: str | None = None  # the error of the last record logged with one
        self.error: OSError | None = None
        """The first error writing the file (a full disk): the run reports it at its end."""

    def flush(self) -> None:
        """Flush only when due, else have the timer flush when due; :meth:`emit` calls this
        after every record."""
        waited = self._clock() - self._last_flush
        if waited >= self._interval:
            self.force_flush()
        elif self._deferred and (self._timer is None or self._timer.finished.is_set()):
            if self._timer is not None:
                self._timer.join()  # done already: its thread is ending
            self._timer = threading.Timer(self._interval - waited, self._flush_when_due)
            self._timer.name = "experiment-log-flush"
            self._timer.daemon = True
            self._timer.start()

    def _flush_when_due(self) -> None:
        self.acquire()
        try:
            self.force_flush()
        finally:
            self.release()

    def force_flush(self) -> None:
        """Write what is buffered to the file now; a write error is kept in :attr:`error`."""
        self._last_flush = self._clock()
        try:
            super().flush()
        except OSError as error:  # a full disk must not stop training or its shutdown
            self.error = self.error or error

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record`` (or hold it until the attempt's first line); warnings and errors
        reach the file at once."""
        if self._held is not None:
            self._held.append(record)
            return
        super().emit(record)
        error = record.exc_info[1] if record.exc_info else None
        if record.levelno >= logging.ERROR and error is not None:
            self._failure = _one_line(f"{type(error).__name__}: {error}")
        if record.levelno >= logging.WARNING:
            self.force_flush()

    def begin(self, line: str) -> None:
        """Write the attempt's first line, dated when the file was opened, then the records
        held until now, and flush."""
        record = _record(line)
        record.created, record.msecs = self._opened, (self._opened % 1) * 1000
        self.acquire()
        try:
            held, self._held = self._held or [], None
            for each in (record, *held):
                self.emit(each)
            self.force_flush()
        finally:
            self.release()

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802  # logging's name
        """Keep a write error in :attr:`error`, then report it as logging does (on stderr)."""
        failure = sys.exc_info()[1]
        if isinstance(failure, OSError):
            self.error = self.error or failure
        super().handleError(record)

    def close(self) -> None:
        """Write the attempt's last line (and its first, if :meth:`begin` was not called),
        flush everything, then close the file (a write error is kept in :attr:`error`)."""
        self._deferred = False  # closing flushes everything itself
        if self._timer is not None:  # no thread of ember's outlives the run
            self._timer.cancel()
            self._timer.join()
        if self._attempt and self.stream is not None:
            if self._held is not None:
                self.begin(_attempt_line(self.before or "", None, trained=False))
            ended = "" if self._failure is None else f": training failed ({self._failure})"
            self.emit(_record(f"Attempt of pid {os.getpid()} ended{ended}"))
        self.force_flush()
        try:
            super().close()
        except OSError as error:
            self.error = self.error or error


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord(_LOGGER, logging.INFO, __file__, 0, message, None, None)


def _one_line(text: str, limit: int = 300) -> str:
    """``text``'s first line, cut to ``limit`` characters: an attempt's line stays one line."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def _last_line(path: Path) -> str:
    """The last non-empty line of ``path`` ("" when there is none, or it is no regular file:
    a device such as ``/dev/full`` reads without end)."""
    try:
        if not path.is_file():
            return ""
        with path.open("rb") as file:
            size = file.seek(0, os.SEEK_END)
            file.seek(max(0, size - _TAIL))
            tail = file.read(_TAIL)
    except OSError:
        return ""
    lines = [line for line in tail.decode("utf-8", "replace").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _attempt_line(before: str, resume: Any, *, trained: bool = True) -> str:
    """The first line of an attempt (see the module doc): ``before`` is the log's last line
    before it, ``resume`` the checkpoint it resumes from (None: it starts afresh)."""
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    torchrun = ""
    if restart is not None:
        most = os.environ.get("TORCHELASTIC_MAX_RESTARTS", "?")
        torchrun = f" (torchrun restart {restart} of at most {most})"
    if not trained:
        start = "ended before training"
    elif resume is None:
        start = "starts afresh"
    else:
        start = f"resumes from the checkpoint of {resume}"
    return (
        f"Attempt of pid {os.getpid()} on {socket.gethostname()}{torchrun}: {start}; "
        f"{_previous(before)}"
    )


def _previous(before: str) -> str:
    """How the attempt before ended, from the log's last line ``before``."""
    if not before:
        return "the first attempt in this log"
    ended = _ENDED.search(before)
    if ended is None:
        return (
            "the attempt before it did not end (killed, or its machine lost), its last line: "
            f"{_one_line(before)!r}"
        )
    reason = ended.group(1)
    return "the attempt before it ended" + (f": {reason}" if reason else "")


def begin_attempt(handler: ExperimentLogHandler | None, resume: Any) -> None:
    """Start the attempt in the run's log (None: no log): its first line names it, where it
    resumes from (``resume``, a checkpoint point, or None) and how the one before it ended."""
    if handler is not None:
        handler.begin(_attempt_line(handler.before or "", resume))


@contextmanager
def experiment_log(
    path: Path | None, *, attempt: bool = False
) -> Iterator[ExperimentLogHandler | None]:
    """Send the ``ember`` loggers' records to ``path`` (None: nowhere) for the block;
    ``attempt``: the log of a training attempt (see the module doc).

    Yields the handler (None without a path): its :attr:`~ExperimentLogHandler.error`, read
    after the block, says whether the file could not be written.
    """
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = ExperimentLogHandler(path, attempt=attempt)
    logger = logging.getLogger("ember")
    logger.addHandler(handler)
    previous = logger.level
    if previous == logging.NOTSET or previous > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        handler.close()


class _ToRenderer(logging.Handler):
    """Hands each warning of the ``ember`` loggers to a renderer's ``on_warning``."""

    def __init__(self, show: Callable[[str], None]) -> None:
        super().__init__(logging.WARNING)
        self._show = show

    def emit(self, record: logging.LogRecord) -> None:
        """Show the record's message (a renderer that fails here must not stop training)."""
        try:
            self._show(record.getMessage())
        except Exception:  # the record is in experiment.log either way
            self.handleError(record)


@contextmanager
def warnings_to(show: Callable[[str], None] | None) -> Iterator[None]:
    """Send the ``ember`` loggers' warnings to ``show`` (a renderer's) for the block."""
    if show is None:
        yield
        return
    handler = _ToRenderer(show)
    logger = logging.getLogger("ember")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
