"""The metric files' writer: a process of its own, so that making files never costs training.

Making a directory and a file per metric and epoch takes tens of microseconds to over a
millisecond, a short epoch's whole step budget. On a thread of the training process each of
those system calls hands the GIL over and must win it back from the training thread, which then
waits too (130-200 voluntary context switches per 100 short epochs); another process making the
same files costs training only the kernel's share (``benchmarks/event_floor.py``'s file floor).
So :class:`MetricFileWriter` starts a small Python process, ``metric-writer`` (the program in
``blocks.py``, run by path in isolated mode), with the first block and hands it the blocks
through a pipe, in order, never pickled; a pipe of a MiB (Linux) holds what the disk has not
written yet, and only a fuller one makes training wait.

Errors: the child reports a failed block at once and goes on with the later ones; the parent
raises the first at its next :meth:`~MetricFileWriter.raise_pending`,
:meth:`~MetricFileWriter.flush` or :meth:`~MetricFileWriter.close`, once (a later one is added to
it as a note), as :class:`~ember.train._background.BackgroundWorker` does for a thread's jobs. A
child that dies is named with its exit code.

The child ends when told to (:meth:`~MetricFileWriter.close`, which waits for it: no process of
ember's outlives ``launch``), or when its input ends because the training process died: it writes
what it was handed first, so a crash loses no line that left the training process. It ignores the
signals that stop training (Ctrl-C reaches a terminal's whole process group; SIGTERM and SIGUSR1
stop a run gracefully, whose last lines must still be written). Where no process can be started (not
a POSIX system, no ``sys.executable``, a frozen application) the blocks go to a ``metric-writer``
thread instead, with the same rules.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ember.train._logger import blocks as _program
from ember.train._logger.blocks import (
    DONE,
    END,
    FRAME,
    SYNC,
    Block,
    encode,
    read_exactly,
    revive,
    write_all,
    write_blocks,
)

if TYPE_CHECKING:
    from ember.train._background import BackgroundWorker

__all__ = ["MetricFileWriter"]


class MetricFileWriter:
    """Writes blocks of metric lines on ``metric-writer``: a process, started by the first
    block, or a thread where no process can be started; see the module doc."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: BackgroundWorker | None = None
        self._error: Exception | None = None

    def write(self, blocks: Sequence[Block]) -> None:
        """Hand ``blocks`` over, in order after the earlier ones (a pending error is not raised
        here: callers call :meth:`raise_pending` first)."""
        if self._process is None and self._thread is None:
            self._start()
        if self._thread is not None:
            self._thread.submit(lambda: write_blocks(list(blocks)))
        else:
            self._send(encode(list(blocks)))

    def raise_pending(self) -> None:
        """Re-raise the first error of a failed write, once (without waiting for the writer)."""
        if self._thread is not None:
            self._thread.raise_pending()
            return
        self._read_replies(until_done=False)
        error, self._error = self._error, None
        if error is not None:
            raise error

    def flush(self) -> None:
        """Wait until every block handed over is written, then raise a pending error."""
        if self._thread is not None:
            self._thread.flush()
            return
        if self._process is not None:
            self._send(FRAME.pack(SYNC, 0))
            self._read_replies(until_done=True)
        self.raise_pending()

    def close(self) -> None:
        """Write what was handed over, end the process (or thread), raise a pending error;
        idempotent."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.close()
            return
        try:
            self.flush()
        finally:
            process, self._process = self._process, None
            if process is not None:
                _end(process)

    def _start(self) -> None:
        if _can_run_python_files():
            try:
                process = subprocess.Popen(
                    [sys.executable, "-I", "-S", _program.__file__],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
            except OSError:
                pass
            else:
                assert process.stdin is not None
                import fcntl  # POSIX only

                with contextlib.suppress(OSError, AttributeError):  # a larger pipe: Linux
                    fcntl.fcntl(process.stdin.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
                self._process = process
                return
        from ember.train._background import BackgroundWorker

        self._thread = BackgroundWorker("metric-writer", job="metric file write")

    def _send(self, frame: bytes) -> None:
        process = self._process
        assert process is not None and process.stdin is not None
        try:
            write_all(process.stdin.fileno(), frame)
        except BrokenPipeError:
            raise self._gone(process) from None

    def _read_replies(self, *, until_done: bool) -> None:
        """Take the errors the child reported so far and, ``until_done``, wait for its answer
        to the last sync."""
        process = self._process
        if process is None:
            return
        assert process.stdout is not None
        fd = process.stdout.fileno()
        while until_done or _readable(fd):
            header = read_exactly(fd, FRAME.size)
            if header is None:
                raise self._gone(process)
            kind, size = FRAME.unpack(header)
            if kind == DONE:
                return
            payload = read_exactly(fd, size)
            if payload is None:
                raise self._gone(process)
            self._keep(revive(payload))

    def _keep(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        else:
            self._error.add_note(f"a later metric file write failed too: {error}")

    def _gone(self, process: subprocess.Popen[bytes]) -> RuntimeError:
        """The error for a child that died (reported once: a later block starts a new one)."""
        self._process = None
        code = process.wait()
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        process.stdout.close()
        return RuntimeError(
            f"the metric-writer process (pid {process.pid}) ended with exit code {code} before "
            "the run did: the metric lines handed to it since its last sync may be missing"
        )


def _end(process: subprocess.Popen[bytes]) -> None:
    """Tell the child to end (explicitly: a process forked since holds its input open too) and
    wait for it."""
    assert process.stdin is not None and process.stdout is not None
    with contextlib.suppress(OSError):  # the child is gone already: nothing left to end
        write_all(process.stdin.fileno(), FRAME.pack(END, 0))
    process.stdin.close()
    process.wait()
    process.stdout.close()


def _can_run_python_files() -> bool:
    """Whether this interpreter can run ``blocks.py`` as a program: POSIX, a ``sys.executable``
    that is Python (not a frozen application's binary) and the module as a file."""
    return (
        os.name == "posix"
        and bool(sys.executable)
        and not getattr(sys, "frozen", False)
        and os.path.isfile(_program.__file__)
    )


def _readable(fd: int) -> bool:
    """Whether reading ``fd`` would not block (``poll``: ``select`` refuses descriptors above
    1023, which a process with many open files reaches)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
