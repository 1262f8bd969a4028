"""Blocks of metric lines: written to their files, and sent through a pipe to the metric-writer
process, whose program this module is (``metric_writer.py`` starts it).

A block is ``(path, text, truncate)``: ``text`` is appended to ``path`` (``truncate``: the file
starts anew, its directory made first). Frames on the pipe are a kind and a length, then the
payload: the blocks (paths and texts as bytes, never pickled), a sync, or the end. The child
answers a sync when every block before it is written, and reports a failed block's error at once
(its errno, message and path: the parent raises an ``OSError`` of the same kind).

Run by path in isolated mode (``python -I -S blocks.py``), the child imports nothing but ``os``,
``signal``, ``struct`` and ``sys``: it is up in ~10 ms, where ``json``, ``subprocess`` and
``typing`` would triple that for every run, on the core training shares with it.
"""

from __future__ import annotations

import os
import signal
import struct
import sys

__all__ = [
    "BLOCKS",
    "DONE",
    "END",
    "ERROR",
    "FRAME",
    "SYNC",
    "Block",
    "encode",
    "revive",
    "write_blocks",
]

Block = tuple[str, str, bool]
"""``(path, text, truncate)``: append ``text`` to ``path``; ``truncate``: start the file anew."""

FRAME = struct.Struct("<BI")
"""A frame's header: its kind and its payload's length."""
BLOCKS, SYNC, END = 1, 2, 3  # kinds to the child
DONE, ERROR = 1, 2  # kinds from the child
_ENTRY = struct.Struct("<IIB")  # a block's path length, text length, truncate


def write_blocks(blocks: list[Block]) -> None:
    """Write each block in order; a failed block does not keep the others from being written,
    and the first error is raised."""
    _write_encoded([(path, text.encode("utf-8"), truncate) for path, text, truncate in blocks])


def encode(blocks: list[Block]) -> bytes:
    """The frame that hands ``blocks`` to the child."""
    parts: list[bytes] = []
    for path, text, truncate in blocks:
        name, data = os.fsencode(path), text.encode("utf-8")
        parts += (_ENTRY.pack(len(name), len(data), truncate), name, data)
    payload = b"".join(parts)
    return FRAME.pack(BLOCKS, len(payload)) + payload


def revive(payload: bytes) -> Exception:
    """The exception an ``ERROR`` frame's payload describes (``OSError(errno, ...)`` makes the
    subclass its errno names: ``PermissionError``, ``NotADirectoryError``...)."""
    kind, *fields = payload.decode("utf-8").split("\0")
    if kind == "os":
        number, message, filename = fields
        return OSError(int(number), message, filename or None)
    return RuntimeError(fields[0])


def _describe(error: Exception) -> bytes:
    if isinstance(error, OSError) and error.errno is not None:
        filename = "" if error.filename is None else os.fsdecode(error.filename)
        text = f"os\0{error.errno}\0{error.strerror}\0{filename}"
    else:
        text = f"other\0{type(error).__name__}: {error}"
    return text.encode("utf-8")


def _write_encoded(blocks: list[tuple[str, bytes, bool]]) -> None:
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
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except OSError as error:  # a write or a close names no file (a full disk): name it
        error.filename = path
        raise


def _decode(payload: bytes) -> list[tuple[str, bytes, bool]]:
    blocks, at = [], 0
    while at < len(payload):
        name_size, data_size, truncate = _ENTRY.unpack_from(payload, at)
        at += _ENTRY.size
        path = os.fsdecode(payload[at : at + name_size])
        blocks.append((path, payload[at + name_size : at + name_size + data_size], bool(truncate)))
        at += name_size + data_size
    return blocks


def read_exactly(fd: int, size: int) -> bytes | None:
    """``size`` bytes from ``fd``, or None at its end (the other side is gone)."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _child(inbox: int, outbox: int) -> None:
    """The writer process: frames from ``inbox`` until told to end or the input ends."""
    for name in ("SIGINT", "SIGTERM", "SIGUSR1", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    while (header := read_exactly(inbox, FRAME.size)) is not None:
        kind, size = FRAME.unpack(header)
        payload = read_exactly(inbox, size)
        if payload is None or kind == END:
            os._exit(0)  # every block is written: nothing else to tidy up (a third as slow)
        if kind == SYNC:
            write_all(outbox, FRAME.pack(DONE, 0))
            continue
        try:
            _write_encoded(_decode(payload))
        except Exception as error:  # the parent raises it: the child goes on with later blocks
            message = _describe(error)
            write_all(outbox, FRAME.pack(ERROR, len(message)) + message)


if __name__ == "__main__":  # the metric-writer process (run by path: nothing of ember imported)
    _child(sys.stdin.fileno(), sys.stdout.fileno())
