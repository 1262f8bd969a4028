"""The application log, ``experiment.log``: what ember's loggers say during a run.

Records of the ``ember`` loggers at INFO and above are appended to the file (it accumulates
across runs, as Burn's does). Lines are flushed to the file at most once a second, and at once
for warnings and errors: flushing after every line would cost a small model a few percent of
its speed. The handler is removed, and the file flushed and closed, when the run ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["ExperimentLogHandler", "experiment_log"]

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

    def flush(self) -> None:
        """Flush only when due; :meth:`emit` calls this after every record."""
        if self._clock() - self._last_flush >= self._interval:
            self.force_flush()

    def force_flush(self) -> None:
        """Write what is buffered to the file now."""
        self._last_flush = self._clock()
        super().flush()

    def emit(self, record: logging.LogRecord) -> None:
        """Write ``record``; warnings and errors reach the file at once."""
        super().emit(record)
        if record.levelno >= logging.WARNING:
            self.force_flush()

    def close(self) -> None:
        """Flush everything, then close the file."""
        self.force_flush()
        super().close()


@contextmanager
def experiment_log(path: Path | None) -> Iterator[None]:
    """Send the ``ember`` loggers' records to ``path`` (None: nowhere) for the block."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = ExperimentLogHandler(path)
    logger = logging.getLogger("ember")
    logger.addHandler(handler)
    previous = logger.level
    if previous == logging.NOTSET or previous > logging.INFO:
        logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        handler.close()
