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

Every wait on the writer is bounded by ``timeout`` seconds (:data:`WRITER_TIMEOUT` unless the
logger says otherwise, ``FileMetricLogger(writer_timeout=...)``): room in a full pipe for a block,
the answer to a sync, the end of the process. A writer that has not answered by then (a stopped
process; a disk that hangs, as a hung NFS or FUSE mount does) is named in a ``TimeoutError`` with
its pid and what it was asked, and killed: the run ends with that error as with a writer that
died, and a later block starts a new writer. A thread cannot be killed: one that has not answered
is named the same way and left behind (a daemon thread: it keeps no process alive).

An error names the directory the files are written under (``where``): an ``OSError`` the child
reports carries its errno, the file and that directory.
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
    revive,
    write_blocks,
)

if TYPE_CHECKING:
    from ember.train._background import BackgroundWorker

__all__ = ["WRITER_TIMEOUT", "MetricFileWriter"]

WRITER_TIMEOUT = 120.0
"""How long, in seconds, training waits for the metric-writer to take a block, answer a sync or
end before it is taken for hung: a flush hands over at most a MiB of lines, which the slowest
disk that still works writes in far less."""


class MetricFileWriter:
    """Writes blocks of metric lines on ``metric-writer``: a process, started by the first
    block, or a thread where no process can be started; see the module doc. ``where`` names the
    directory the files are under in errors; ``timeout`` bounds every wait on the writer."""

    def __init__(self, where: str, *, timeout: float = WRITER_TIMEOUT) -> None:
        self._where = where
        self._timeout = timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: BackgroundWorker | None = None
        self._error: Exception | None = None
        self._unsynced = 0  # blocks handed over since the last answered sync

    def write(self, blocks: Sequence[Block]) -> None:
        """Hand ``blocks`` over, in order after the earlier ones (a pending error is not raised
        here: callers call :meth:`raise_pending` first)."""
        if self._process is None and self._thread is None:
            self._start()
        self._unsynced += len(blocks)
        if self._thread is not None:
            self._thread.submit(lambda: self._write_here(list(blocks)))
        else:
            frame = encode(list(blocks))
            self._send(frame, f"to take {len(blocks)} block(s) of lines ({len(frame)} bytes)")

    def raise_pending(self) -> None:
        """Re-raise the first error of a failed write, once (without waiting for the writer)."""
        if self._thread is not None:
            self._thread.raise_pending()
            return
        self._read_replies(None)
        error, self._error = self._error, None
        if error is not None:
            raise error

    def flush(self) -> None:
        """Wait until every block handed over is written, then raise a pending error."""
        asked = f"for a flush of {self._unsynced} block(s) of lines"
        if self._thread is not None and not self._thread.wait(self._timeout):
            thread, self._thread = self._thread, None
            thread.close(timeout=0.0)  # it stops once the file system lets it go
            raise self._thread_hung(asked)
        if self._process is not None:
            self._send(FRAME.pack(SYNC, 0), asked)
            self._read_replies(asked)
        self._unsynced = 0
        self.raise_pending()

    def close(self) -> None:
        """Write what was handed over, end the process (or thread), raise a pending error;
        idempotent."""
        thread, self._thread = self._thread, None
        if thread is not None:
            if not thread.close(self._timeout):
                raise self._thread_hung("to close")
            return
        try:
            self.flush()
        finally:
            if self._process is not None:
                self._end(self._process)

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
                os.set_blocking(process.stdin.fileno(), False)  # a full pipe: wait in poll
                self._process = process
                return
        from ember.train._background import BackgroundWorker

        self._thread = BackgroundWorker("metric-writer", job="metric file write")

    def _write_here(self, blocks: list[Block]) -> None:
        """The thread's job: the blocks written, an error naming the directory."""
        try:
            write_blocks(blocks)
        except OSError as error:
            raise self._placed(error) from None

    def _send(self, frame: bytes, asked: str) -> None:
        """Write ``frame`` to the child; each wait for room in the pipe at most ``timeout``
        (a child that writes slowly but goes on is waited for)."""
        process = self._process
        assert process is not None and process.stdin is not None
        fd, view = process.stdin.fileno(), memoryview(frame)
        try:
            while view:
                if not _ready(fd, select.POLLOUT, self._timeout):
                    raise self._hung(process, asked)
                with contextlib.suppress(BlockingIOError):  # less room than a small frame
                    view = view[os.write(fd, view) :]
        except BrokenPipeError:
            raise self._gone(process) from None

    def _read_replies(self, asked: str | None) -> None:
        """Take the errors the child reported so far and, given what it was ``asked`` (a
        flush), wait for its answer to the last sync."""
        process = self._process
        if process is None:
            return
        assert process.stdout is not None
        fd = process.stdout.fileno()
        while asked is not None or _ready(fd, select.POLLIN, 0.0):
            header = self._receive(process, FRAME.size, asked or "to finish an error report")
            kind, size = FRAME.unpack(header)
            if kind == DONE:
                return
            payload = self._receive(process, size, "to finish an error report")
            self._keep(self._placed(revive(payload)))

    def _receive(self, process: subprocess.Popen[bytes], size: int, asked: str) -> bytes:
        """``size`` bytes from the child, each wait for them at most ``timeout``."""
        assert process.stdout is not None
        fd, data = process.stdout.fileno(), b""
        while len(data) < size:
            if not _ready(fd, select.POLLIN, self._timeout):
                raise self._hung(process, asked)
            chunk = os.read(fd, size - len(data))
            if not chunk:  # its end: the child is gone
                raise self._gone(process)
            data += chunk
        return data

    def _keep(self, error: Exception) -> None:
        if self._error is None:
            self._error = error
        else:
            self._error.add_note(f"a later metric file write failed too: {error}")

    def _placed(self, error: Exception) -> Exception:
        """``error`` naming the directory written under (an ``OSError`` keeps its errno and
        file; the child names the file of every write it reports)."""
        if isinstance(error, OSError) and error.errno is not None:
            message = f"{error.strerror}, writing the metric logs under {self._where}"
            return OSError(error.errno, message, error.filename)
        return error

    def _end(self, process: subprocess.Popen[bytes]) -> None:
        """Tell the child to end (explicitly: a process forked since holds its input open too)
        and wait, at most ``timeout``, for it."""
        assert process.stdin is not None and process.stdout is not None
        with contextlib.suppress(RuntimeError):  # the child is gone already: nothing to end
            self._send(FRAME.pack(END, 0), "to end")
        self._process = None
        process.stdin.close()
        try:
            process.wait(self._timeout)
        except subprocess.TimeoutExpired:
            raise self._hung(process, "to end") from None
        process.stdout.close()

    def _gone(self, process: subprocess.Popen[bytes]) -> RuntimeError:
        """The error for a child that died (reported once: a later block starts a new one)."""
        code = self._discard(process)
        return RuntimeError(
            f"the metric-writer process (pid {process.pid}) ended with exit code {code} before "
            f"the run did: the metric lines handed to it since its last sync may be missing "
            f"(writing the metric logs under {self._where})"
        )

    def _hung(self, process: subprocess.Popen[bytes], asked: str) -> TimeoutError:
        """The error for a child that has not answered in time, killed (a later block starts a
        new one)."""
        code = self._discard(process)
        ended = "it was killed" if code is not None else "it could not be killed either"
        return TimeoutError(
            f"the metric-writer process (pid {process.pid}) was asked {asked} and has not "
            f"answered within {self._timeout:g} s: {ended}, and the metric lines handed to it "
            f"since its last sync may be missing (writing the metric logs under {self._where}). "
            f"A stopped process or a disk that hangs (a hung NFS or FUSE mount) does this; for "
            f"a disk this slow, give FileMetricLogger(writer_timeout=...) more seconds"
        )

    def _discard(self, process: subprocess.Popen[bytes]) -> int | None:
        """Kill the child (a dead one is left as it is), wait at most ``timeout`` for it and
        close its pipes; its exit code, or None when it did not end."""
        self._process, self._unsynced = None, 0
        process.kill()
        try:
            code: int | None = process.wait(self._timeout)
        except subprocess.TimeoutExpired:  # blocked in the kernel: reaped when it ends
            code = None
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        process.stdout.close()
        return code

    def _thread_hung(self, asked: str) -> TimeoutError:
        """The error for a thread that has not answered in time, left behind (a later block
        starts a new one)."""
        self._unsynced = 0
        return TimeoutError(
            f"the metric-writer thread was asked {asked} and has not answered within "
            f"{self._timeout:g} s: it is left behind (a thread cannot be killed; it ends once "
            f"the file system lets it go), and the metric lines handed to it may be missing "
            f"(writing the metric logs under {self._where}). A disk that hangs (a hung NFS or "
            f"FUSE mount) does this; for a disk this slow, give "
            f"FileMetricLogger(writer_timeout=...) more seconds"
        )


def _can_run_python_files() -> bool:
    """Whether this interpreter can run ``blocks.py`` as a program: POSIX, a ``sys.executable``
    that is Python (not a frozen application's binary) and the module as a file."""
    return (
        os.name == "posix"
        and bool(sys.executable)
        and not getattr(sys, "frozen", False)
        and os.path.isfile(_program.__file__)
    )


def _ready(fd: int, event: int, timeout: float) -> bool:
    """Whether ``fd`` is ready for ``event`` (or at its end) within ``timeout`` seconds
    (``poll``: ``select`` refuses descriptors above 1023, which a process with many open files
    reaches)."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(timeout * 1000))
