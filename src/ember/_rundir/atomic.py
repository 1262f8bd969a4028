"""Files written all or nothing: a crash, an error or a full disk leaves a file's old content or
its new one, never a mix (checkpoints, manifests, ``config.json``, ``summary.json``, a tracker's
own files); the temp files a crash left behind are cleared by a later write."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CheckpointFile",
    "atomic_fill",
    "atomic_write",
    "fsync_directory",
    "remove_stale_temps",
]

_TEMP_RE = r"\.[0-9a-f]{16}\.tmp"  # what atomic_fill appends to a final name


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    """A file as written: its name in the checkpoint directory, size in bytes and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


def fsync_directory(directory: Path) -> None:
    """Make a rename or removal in ``directory`` durable (a no-op on Windows)."""
    if os.name == "nt":  # pragma: no cover - Windows cannot open a directory for fsync
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Write ``data`` to ``path`` so that ``path`` holds either its old content or all of ``data``.

    See :func:`atomic_fill`, which does the work (``sync=False``: no flush to disk yet).
    """

    def fill(temp: Path) -> None:
        with temp.open("wb") as handle:
            handle.write(data)

    atomic_fill(path, fill, sync=sync)


def atomic_fill(path: Path, fill: Callable[[Path], None], *, sync: bool = True) -> CheckpointFile:
    """Have ``fill`` write a temp file, then make it ``path``, all or nothing; describe it.

    The temp file is ``.{name}.{random}.tmp`` in the same directory; once filled it is read
    back for its size and SHA-256 (as written to disk, not as meant), fsynced, renamed over
    ``path``, and the directory is fsynced. On an error the temp file is removed; after a crash
    it stays behind and :func:`remove_stale_temps` clears it on a later save. Hashing and
    writing happen outside the GIL, so a background writer barely slows training.

    ``sync=False`` skips both flushes: the rename is still all or nothing (a crashed process
    never leaves a partial file), but a power loss soon after may leave the old content, or
    none. For files that every launch writes again (``config.json``), where two disk flushes
    would cost a short run several percent of its time.
    """
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fill(temp)
        digest = hashlib.sha256()
        with temp.open("rb") as handle:
            while block := handle.read(1 << 24):
                digest.update(block)
            size = handle.tell()
            if sync:
                os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_directory(path.parent)
    return CheckpointFile(path.name, size, digest.hexdigest())


def remove_stale_temps(directory: Path, final_name_pattern: str) -> None:
    """Remove temp files that :func:`atomic_write` left for final names matching the regex."""
    temp = re.compile(rf"\.{final_name_pattern}{_TEMP_RE}")
    for entry in os.scandir(directory):
        if temp.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)
