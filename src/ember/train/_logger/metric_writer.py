"""The metric files' writer: a process of its own, so that making files never costs training.

Making a directory and a file per metric and epoch takes tens of microseconds to over a
millisecond; a short epoch's whole step budget. On a thread of the training process, each of
those system calls hands the GIL over and must win it back from the training thread, which then
waits too: measured on the seed workload (100 epochs of 7 steps, two directories and two files an
epoch), that convoy cost 5-7 % of the run, while another process making the same files at its
pace costs under 1 % (``benchmarks/event_floor.py``'s file floor). So :class:`MetricFileWriter`
starts a small Python process (``metric-writer``, this file run by path in isolated mode: it
imports nothing but the standard library) and hands it the blocks through a pipe: one write per
block of lines, in order, never pickled.

Blocks are ``(path, text, truncate)``: ``text`` is appended to ``path`` (``truncate``: the file
starts anew, its directory made first). The child answers a sync with the errors of the blocks
before it; an error is also reported as soon as it happens, and the parent raises it at its next
:meth:`MetricFileWriter.raise_pending`, :meth:`~MetricFileWriter.flush` or
:meth:`~MetricFileWriter.close` (once, the first one; a later one is added to it as a note), as
:class:`~ember.train._background.BackgroundWorker` does for a thread's jobs. A failed block does
not keep the later ones from being written.

The child ends when told to (:meth:`~MetricFileWriter.close`), or when its input ends because the
training process died: it writes what it was handed first, so a crash loses no line that left
the training process. It ignores the signals that stop training (Ctrl-C reaches a terminal's
whole process group; SIGTERM and SIGUSR1 stop a run gracefully, whose last lines must still be
written). Where a process cannot be started (no ``sys.executable``, or an OS without
non-blocking pipes) the blocks go to a ``metric-writer`` thread instead, with the same rules.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ember.train._background import BackgroundWorker

__all__ = ["Block", "MetricFileWriter", "write_blocks"]

Block = tuple[str, str, bool]
"""``(path, text, truncate)``: append ``text`` to ``path``; ``truncate``: start the file anew."""

_FRAME = struct.Struct("<BI")  # kind, payload length
_ENTRY = struct.Struct("<IIB")  # path length, text length, truncate
_BLOCKS, _SYNC, _END = 1, 2, 3  # to the child
_DONE, _ERROR = 1, 2  # from the child


def write_blocks(blocks: Sequence[Block]) -> None:
    """Write each block in order; a failed block does not keep the others from being written,
    and the first error is raised."""
    _write_encoded([(path, text.encode("utf-8"), truncate) for path, text, truncate in blocks])


def _write_encoded(blocks: Sequence[tuple[str, bytes, bool]]) -> None:
    failure: Exception | None = None
    made: set[str] = set()  # directories made here: each new file's is made once
    for path, data, truncate in blocks:
        try:
            _append(path, data, truncate, made)
        except Exception as error:
            failure = failure or error
    if failure is not None:
        raise failure


def _append(path: str, data: bytes, truncate: bool, made: set[str]) -> None:
    directory = os.path.dirname(path)
    if truncate and directory not in made:
        try:
            os.mkdir(directory)
        except FileExistsError:
            pass
        except FileNotFoundError:  # the split's own directory is new too
            os.makedirs(directory, exist_ok=True)
        made.add(directory)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_APPEND)
    fd = os.open(path, flags, 0o666)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def _encode(blocks: Sequence[Block]) -> bytes:
    parts: list[bytes] = []
    for path, text, truncate in blocks:
        name, data = os.fsencode(path), text.encode("utf-8")
        parts += (_ENTRY.pack(len(name), len(data), truncate), name, data)
    payload = b"".join(parts)
    return _FRAME.pack(_BLOCKS, len(payload)) + payload


def _decode(payload: bytes) -> list[tuple[str, bytes, bool]]:
    blocks, at = [], 0
    while at < len(payload):
        name_size, data_size, truncate = _ENTRY.unpack_from(payload, at)
        at += _ENTRY.size
        path = os.fsdecode(payload[at : at + name_size])
        blocks.append((path, payload[at + name_size : at + name_size + data_size], bool(truncate)))
        at += name_size + data_size
    return blocks


def _describe(error: Exception) -> bytes:
    """An error as JSON the parent turns back into an exception of the same kind."""
    if isinstance(error, OSError):
        fields = {"errno": error.errno, "strerror": error.strerror, "filename": error.filename}
        return json.dumps({"os": fields}).encode("utf-8")
    return json.dumps({"type": type(error).__name__, "message": str(error)}).encode("utf-8")


def _revive(payload: bytes) -> Exception:
    fields = json.loads(payload)
    if "os" in fields:  # OSError(errno, ...) makes the subclass errno names (PermissionError)
        os_fields = fields["os"]
        return OSError(os_fields["errno"], os_fields["strerror"], os_fields["filename"])
    return RuntimeError(f"{fields['type']}: {fields['message']}")


def _read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``, or None at its end (the other side is gone)."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _readable(fd: int) -> bool:
    """Whether reading ``fd`` would not block (``poll``: ``select`` refuses descriptors above
    1023, which a process with many open files reaches)."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _child(inbox: int, outbox: int) -> None:
    """The writer process: frames from ``inbox`` until told to end or the input ends."""
    for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    while (header := _read_exactly(inbox, _FRAME.size)) is not None:
        kind, size = _FRAME.unpack(header)
        payload = _read_exactly(inbox, size)
        if payload is None or kind == _END:
            os._exit(0)  # every block is written: nothing else to tidy up (a third as slow)
        if kind == _SYNC:
            _write_all(outbox, _FRAME.pack(_DONE, 0))
            continue
        try:
            _write_encoded(_decode(payload))
        except Exception as error:  # the parent raises it: the child goes on with later blocks
            message = _describe(error)
            _write_all(outbox, _FRAME.pack(_ERROR, len(message)) + message)


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
            self._thread.submit(lambda: write_blocks(blocks))
        else:
            self._send(_encode(blocks))

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
            self._send(_FRAME.pack(_SYNC, 0))
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
        if sys.executable and os.name == "posix" and os.path.isfile(__file__):
            try:
                process = subprocess.Popen(
                    [sys.executable, "-I", "-S", __file__],
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
            _write_all(process.stdin.fileno(), frame)
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
            header = _read_exactly(fd, _FRAME.size)
            if header is None:
                raise self._gone(process)
            kind, size = _FRAME.unpack(header)
            if kind == _DONE:
                return
            self._keep(_revive(_read_exactly(fd, size) or b"{}"))

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
        _write_all(process.stdin.fileno(), _FRAME.pack(_END, 0))
    process.stdin.close()
    process.wait()
    process.stdout.close()


if __name__ == "__main__":  # the child: run by path, isolated (nothing of ember imported)
    _child(sys.stdin.fileno(), sys.stdout.fileno())
