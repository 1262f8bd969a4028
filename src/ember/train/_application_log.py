"""The application log, ``experiment.log``: what ember's loggers say during a run.

Records of the ``ember`` loggers at INFO and above are appended to the file (it accumulates
across runs, as Burn's does). Lines are flushed to the file at most once a second, and at once
for warnings and errors: flushing after every line would cost a small model a few percent of
its speed. The handler is removed, and the file flushed and closed, when the run ends. A file that
cannot be written (a full disk) never stops training: the first write error is kept and the run
reports it in its result when it ends.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ExperimentLogHandler", "experiment_log", "warnings_to"]

_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


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
    """A file handler that flushes at most every ``interval`` seconds, and on warnings."""

    def __init__(
        self,
        path: Path,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(path, encoding="utf-8")
        self.setLevel(logging.INFO)
        self.setFormatter(_Formatter())
        self._interval = interval
        self._clock = clock
        self._last_flush = clock()
        self.error: OSError | None = None
        """The first error writing the file (a full disk): the run reports it at its end."""

    def flush(self) -> None:
        """Flush only when due; :meth:`emit` calls this after every record."""
        if self._clock() - self._last_flush >= self._interval:
            self.force_flush()

    def force_flush(self) -> None:
        """Write what is buffered to the file now; a write error is kept in :attr:`error`."""
        self._last_flush = self._clock()
        try:
            super().flush()
        except OSError as error:  # a full disk must not stop training or its shutdown
            self.error = self.error or error

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record``; warnings and errors reach the file at once."""
        super().emit(record)
        if record.levelno >= logging.WARNING:
            self.force_flush()

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802  # logging's name
        """Keep a write error in :attr:`error`, then report it as logging does (on stderr)."""
        failure = sys.exc_info()[1]
        if isinstance(failure, OSError):
            self.error = self.error or failure
        super().handleError(record)

    def close(self) -> None:
        """Flush everything, then close the file (a write error is kept in :attr:`error`)."""
        self.force_flush()
        try:
            super().close()
        except OSError as error:
            self.error = self.error or error


@contextmanager
def experiment_log(path: Path | None) -> Iterator[ExperimentLogHandler | None]:
    """Send the ``ember`` loggers' records to ``path`` (None: nowhere) for the block.

    Yields the handler (None without a path): its :attr:`~ExperimentLogHandler.error`, read
    after the block, says whether the file could not be written.
    """
    if path is None:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = ExperimentLogHandler(path)
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
