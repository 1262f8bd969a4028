"""A run directory's files read back under guards, as the checkpoint readers read theirs
(``checkpoints.py``).

What ``ember.runs``, ``ember summary``, ``plot`` and ``compare`` (and a launch reading its own
logs back, and the ``curves`` artifact) read from a run directory may come from elsewhere: a
shared or downloaded directory. Every such read goes through this module:

* **only regular files inside the run**: a file's path, links resolved, must stay under the run
  directory (a ``Loss.log`` linked to ``/etc/passwd`` or ``/dev/zero`` is refused, its content
  never shown); a FIFO or a device is refused without a blocking open (``stat`` first, then an
  ``O_NONBLOCK`` open checked again), so nothing hangs and nothing endless is read;
* **size bounds**: a log (metric lines, ``steps.jsonl``) at most :data:`MAX_LOG_SIZE` bytes, each
  line at most :data:`MAX_LINE` bytes, read a chunk at a time (a refused line costs a MiB of
  memory, not its size); a JSON file (``config.json``, ``summary.json``, ``run-end.json``) at most
  :data:`MAX_JSON_SIZE` bytes and :data:`MAX_JSON_DEPTH` levels deep; ``experiment.log``, written
  by every launch, is read from its last :data:`MAX_LOG_TAIL` bytes;
* **epoch numbers** (the ``N`` of ``epoch-N``) at most :data:`MAX_EPOCH`;
* **UTF-8** text (``experiment.log``'s undecodable bytes replaced).

Anything else is a :class:`~ember.RunFileError` naming the file and the problem (a missing file
is not an error: each reader says what its absence means). Only complete lines are read, so a
run still being trained reads as far as its files got. A launch reading its own logs back
(``FileMetricLogger.read_numeric``) keeps every guard but the first: its directory is its own,
and its writer follows links too.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, NoReturn

from ember._errors import RunFileError

__all__ = [
    "MAX_EPOCH",
    "MAX_JSON_DEPTH",
    "MAX_JSON_SIZE",
    "MAX_LINE",
    "MAX_LOG_SIZE",
    "MAX_LOG_TAIL",
    "epoch_number",
    "parse_json",
    "read_run_bytes",
    "read_run_json",
    "read_run_lines",
    "read_run_tail",
]

MAX_LOG_SIZE = 1 << 30
"""The largest log read (1 GiB: 40 million batch lines of one metric in one epoch)."""
MAX_LINE = 1 << 20
"""The longest line of a log read (1 MiB; a metric's line is tens of bytes)."""
MAX_JSON_SIZE = 1 << 26
"""The largest JSON file read (64 MiB)."""
MAX_JSON_DEPTH = 100
"""The deepest nesting of a JSON file read (a configuration nests a few levels)."""
MAX_LOG_TAIL = 1 << 24
"""How much of the end of ``experiment.log`` is read for how the latest launch ended (16 MiB)."""
MAX_EPOCH = (1 << 31) - 1
"""The largest epoch number read."""
_NONBLOCKING = getattr(os, "O_NONBLOCK", 0)  # POSIX: a FIFO's open returns at once


def read_run_lines(path: str | os.PathLike[str], root: str | os.PathLike[str] | None) -> list[str]:
    """The complete lines of the log ``path`` of the run in ``root`` (a line still being written
    is left out; lines end with ``\\n`` only); [] when there is no such file. ``root`` None: a
    launch reading its own logs, which follows links anywhere, as its writer does."""
    with _open(path, root, MAX_LOG_SIZE) as file:
        if file is None:
            return []
        lines: list[str] = []
        pending, size = b"", 0
        while chunk := file.read(MAX_LINE):  # a line inside a chunk is short enough
            size += len(chunk)
            if size > MAX_LOG_SIZE:
                _refuse(path, f"it grew past {MAX_LOG_SIZE} bytes while it was read")
            end = chunk.rfind(b"\n")
            first = chunk.find(b"\n") if end >= 0 else len(chunk)
            if len(pending) + first > MAX_LINE:
                _refuse(path, f"line {len(lines) + 1} is longer than {MAX_LINE} bytes")
            if end < 0:
                pending += chunk
                continue
            lines += _text(pending + chunk[:end], path, len(lines)).split("\n")
            pending = chunk[end + 1 :]
        return lines


def read_run_bytes(
    path: str | os.PathLike[str], root: str | os.PathLike[str], limit: int = MAX_JSON_SIZE
) -> bytes | None:
    """The bytes of the file ``path`` of the run in ``root`` (at most ``limit``); None when there
    is no such file."""
    with _open(path, root, limit) as file:
        if file is None:
            return None
        data = file.read(limit + 1)
    if len(data) > limit:
        _refuse(path, f"it grew past {limit} bytes while it was read")
    return data


def read_run_tail(
    path: str | os.PathLike[str], root: str | os.PathLike[str], size: int
) -> bytes | None:
    """The last ``size`` bytes (at most) of the file ``path`` of the run in ``root``; None when
    there is no such file."""
    with _open(path, root, None) as file:
        if file is None:
            return None
        file.seek(max(file.seek(0, os.SEEK_END) - size, 0))
        return file.read(size)


def read_run_json(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Any:
    """The JSON document in the file ``path`` of the run in ``root``; None when there is no such
    file."""
    data = read_run_bytes(path, root)
    return None if data is None else parse_json(data, path)


def parse_json(data: bytes, path: str | os.PathLike[str]) -> Any:
    """``data``, the file ``path``'s, as a JSON document no deeper than :data:`MAX_JSON_DEPTH`."""
    text = _text(data, path, 0)
    try:
        document = json.loads(text)
    except RecursionError:
        _refuse(path, f"its JSON is nested more than {MAX_JSON_DEPTH} levels deep")
    except ValueError as error:
        _refuse(path, f"it is not valid JSON: {error}")
    if _deeper_than(document, MAX_JSON_DEPTH):
        _refuse(path, f"its JSON is nested more than {MAX_JSON_DEPTH} levels deep")
    return document


def epoch_number(digits: str, path: str | os.PathLike[str]) -> int:
    """The epoch number ``digits`` (read from ``path``), at most :data:`MAX_EPOCH`."""
    if len(digits) > len(str(MAX_EPOCH)) or int(digits) > MAX_EPOCH:
        _refuse(path, f"its epoch number {digits[:20]}... is more than {MAX_EPOCH}")
    return int(digits)


@contextlib.contextmanager
def _open(
    path: str | os.PathLike[str], root: str | os.PathLike[str] | None, limit: int | None
) -> Iterator[IO[bytes] | None]:
    """The regular file ``path`` inside ``root`` (None: anywhere), open for reading (None when
    missing), of at most ``limit`` bytes (None: any size)."""
    real = os.path.realpath(path)
    top = real if root is None else os.path.realpath(root)
    if real != top and not real.startswith(top.rstrip(os.sep) + os.sep):
        _refuse(path, f"it leads to {real}, outside the run directory {top}")
    try:
        info = os.stat(real)
    except FileNotFoundError:  # no file, or a link to nothing
        yield None
        return
    _check_regular(path, info, limit)
    fd = os.open(real, os.O_RDONLY | _NONBLOCKING)  # swapped for a FIFO meanwhile: no wait
    with os.fdopen(fd, "rb") as file:
        _check_regular(path, os.fstat(fd), limit)
        yield file


def _check_regular(path: str | os.PathLike[str], info: os.stat_result, limit: int | None) -> None:
    if not stat.S_ISREG(info.st_mode):
        _refuse(path, "it is not a regular file (a FIFO, a device or a directory)")
    if limit is not None and info.st_size > limit:
        _refuse(path, f"it is {info.st_size} bytes, more than {limit}")


def _text(data: bytes, path: str | os.PathLike[str], lines_before: int) -> str:
    """``data`` decoded from UTF-8; a refusal names the line (after ``lines_before``)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = lines_before + data.count(b"\n", 0, error.start) + 1
        _refuse(path, f"line {line} is not UTF-8 text ({error.reason} at byte {error.start})")


def _deeper_than(document: Any, depth: int) -> bool:
    """Whether ``document`` nests lists and objects more than ``depth`` levels (no recursion:
    a deep document would exhaust the stack it is checked for)."""
    level: list[Any] = [document]
    for _ in range(depth):
        level = [
            child
            for value in level
            if isinstance(value, dict | list)
            for child in (value.values() if isinstance(value, dict) else value)
        ]
        if not level:
            return False
    return any(isinstance(value, dict | list) for value in level)


def _refuse(path: str | os.PathLike[str], problem: str) -> NoReturn:
    raise RunFileError(f"the run file {Path(path)} cannot be read: {problem}")
