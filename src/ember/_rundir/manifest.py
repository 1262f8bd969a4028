"""Per-epoch manifests: which files make up a checkpoint, with their sizes and SHA-256.

``{directory}/manifest-{epoch}.json`` is written last, atomically, after every file of the epoch::

    {"format": "ember.checkpoint.manifest", "version": 1, "epoch": 3,
     "files": [{"name": "model-3.safetensors", "size": 1234, "sha256": "9f86d0…"}, ...]}

A run's checkpoints are in its ``checkpoint/`` directory (:func:`checkpoint_directory`). An
epoch is *complete* when its manifest parses and every file it lists exists with that size and
hash. :func:`complete_epochs` and :func:`latest_complete_epoch` check exactly that (they read and
hash the files: a damaged or missing file makes the epoch incomplete, so resuming falls back to an
older one). Deleting an epoch removes the manifest first (:func:`delete_manifest`), so a crash in
the middle of a deletion leaves an incomplete epoch, never a half-valid one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from ember._errors import CheckpointError
from ember._rundir.atomic import CheckpointFile, atomic_write, fsync_directory, remove_stale_temps
from ember._rundir.checkpoints import (
    MAX_FILE_SIZE,
    check_epoch,
    check_name,
    checkpoint_file_name,
    read_regular,
    regular_size,
)

__all__ = [
    "Manifest",
    "checkpoint_directory",
    "complete_epochs",
    "delete_manifest",
    "epoch_problem",
    "latest_complete_epoch",
    "manifest_epochs",
    "manifest_path",
    "read_manifest",
    "verify_manifest",
    "write_manifest",
]

FORMAT = "ember.checkpoint.manifest"
VERSION = 1
_NAME_RE = re.compile(r"manifest-([1-9][0-9]*)\.json")
_SHA256_RE = re.compile(r"[0-9a-f]{64}")
_log = logging.getLogger(__name__)
MAX_MANIFEST_SIZE = 1 << 24
"""A manifest lists a few files; a bigger one (16 MiB) is not a manifest and is not read."""


@dataclass(frozen=True, slots=True)
class Manifest:
    """The files of one epoch's checkpoint, as its manifest lists them."""

    epoch: int
    files: tuple[CheckpointFile, ...]

    def file(self, name: str) -> CheckpointFile | None:
        """The entry for file ``name``, or None when the manifest does not list it."""
        return next((entry for entry in self.files if entry.name == name), None)


def manifest_path(directory: str | Path, epoch: int) -> Path:
    """``{directory}/manifest-{epoch}.json``."""
    return Path(directory) / f"manifest-{check_epoch(epoch)}.json"


def write_manifest(directory: str | Path, epoch: int, files: Sequence[CheckpointFile]) -> Path:
    """Atomically write the manifest of ``epoch`` listing ``files``; this commits the epoch."""
    path = manifest_path(directory, epoch)
    names = [entry.name for entry in files]
    if len(set(names)) != len(names):
        raise ValueError(f"a manifest lists each file once, got {names}")
    document = {
        "format": FORMAT,
        "version": VERSION,
        "epoch": epoch,
        "files": [
            {"name": check_name(entry.name), "size": entry.size, "sha256": entry.sha256}
            for entry in files
        ],
    }
    data = (json.dumps(document, indent=2) + "\n").encode("utf-8")
    remove_stale_temps(path.parent, r"manifest-[0-9]+\.json")
    atomic_write(path, data)
    return path


def read_manifest(directory: str | Path, epoch: int) -> Manifest:
    """Parse the manifest of ``epoch``; CheckpointError naming it if missing or invalid."""
    path = manifest_path(directory, epoch)
    text = read_regular(path, "checkpoint manifest", limit=MAX_MANIFEST_SIZE)
    try:
        document = json.loads(text)
    except RecursionError:
        raise CheckpointError(
            f"checkpoint manifest {path} is not valid: its JSON is nested too deeply"
        ) from None
    except ValueError as error:
        raise CheckpointError(f"checkpoint manifest {path} is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise CheckpointError(f"checkpoint manifest {path} is not a JSON object")
    if document.get("format") != FORMAT or document.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint manifest {path} has format {document.get('format')!r} version "
            f"{document.get('version')!r}, expected {FORMAT!r} version {VERSION}"
        )
    if document.get("epoch") != epoch:
        raise CheckpointError(
            f"checkpoint manifest {path} is for epoch {document.get('epoch')!r}, expected {epoch}"
        )
    entries = document.get("files")
    if not isinstance(entries, list):
        raise CheckpointError(f"checkpoint manifest {path} has no list of files")
    files = tuple(_parse_entry(path, entry) for entry in entries)
    return Manifest(epoch, files)


def _parse_entry(path: Path, entry: object) -> CheckpointFile:
    if isinstance(entry, dict):
        name, size, sha256 = entry.get("name"), entry.get("size"), entry.get("sha256")
        if (
            isinstance(name, str)
            and _is_plain_name(name)
            and isinstance(size, int)
            and not isinstance(size, bool)
            and size >= 0
            and isinstance(sha256, str)
            and _SHA256_RE.fullmatch(sha256)
        ):
            return CheckpointFile(name, size, sha256)
    raise CheckpointError(f"checkpoint manifest {path} has an invalid file entry: {entry!r}")


def _is_plain_name(name: str) -> bool:
    try:
        check_name(name)
    except ValueError:
        return False
    return True


def verify_manifest(
    directory: str | Path,
    manifest: Manifest,
    required: Collection[str] = (),
    keep: Collection[str] = (),
) -> dict[str, bytes]:
    """Check every listed file's size and SHA-256, and that the checkpoints named in
    ``required`` (e.g. ``"model"``) are listed; CheckpointError naming the file otherwise.

    The files named in ``keep`` (file names) are read whole, hashed as read and returned, by
    name: what was verified is what their reader parses, never read or hashed again. The others
    are hashed a block at a time and not kept (a sharded checkpoint's shard files: each rank
    reads only the pieces it needs)."""
    directory = Path(directory)
    where = manifest_path(directory, manifest.epoch).name
    for name in required:
        file_name = checkpoint_file_name(name, manifest.epoch)
        if manifest.file(file_name) is None:
            raise CheckpointError(f"checkpoint manifest {where} does not list {file_name}")
    kept: dict[str, bytes] = {}
    for entry in manifest.files:
        path = directory / entry.name
        if not path.exists() and not path.is_symlink():
            raise CheckpointError(f"checkpoint file {path} (listed in {where}) is missing")
        size = regular_size(path, "checkpoint file")  # never hash a FIFO or /dev/zero
        if size != entry.size:
            raise CheckpointError(
                f"checkpoint file {path} is damaged: its size is {size} bytes, "
                f"{where} expects {entry.size} bytes"
            )
        if entry.name in keep:
            data = kept[entry.name] = read_regular(
                path, "checkpoint file", entry.size, limit=MAX_FILE_SIZE
            )
            actual = hashlib.sha256(data).hexdigest()
        else:
            actual = _sha256(path, entry.size)
        if actual != entry.sha256:
            raise CheckpointError(
                f"checkpoint file {path} is damaged: its SHA-256 is {actual}, "
                f"{where} expects {entry.sha256}"
            )
    return kept


def _sha256(path: Path, size: int) -> str:
    """The SHA-256 of the first ``size`` bytes of ``path`` (its whole content: checked before)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            left = size
            while left and (block := handle.read(min(left, 1 << 24))):
                digest.update(block)
                left -= len(block)
    except OSError as error:
        raise CheckpointError(f"checkpoint file {path} cannot be read: {error}") from error
    return digest.hexdigest()


def delete_manifest(directory: str | Path, epoch: int) -> bool:
    """Remove the manifest of ``epoch`` durably (before its files); whether there was one."""
    path = manifest_path(directory, epoch)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(path.parent)
    return True


def manifest_epochs(directory: str | Path) -> list[int]:
    """The epochs that have a manifest file in ``directory`` (valid or not), sorted."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    epochs = (_NAME_RE.fullmatch(path.name) for path in directory.iterdir())
    return sorted(int(match.group(1)) for match in epochs if match)


def checkpoint_directory(directory: str | os.PathLike[str]) -> Path:
    """The checkpoint directory of a run directory (or ``directory`` itself if it holds
    manifests); CheckpointError naming it when there is none."""
    path = Path(directory)
    if not path.is_dir():
        raise CheckpointError(f"no run or checkpoint directory at {path}")
    inner = path / "checkpoint"
    if inner.is_dir():
        return inner
    if manifest_epochs(path):
        return path
    raise CheckpointError(f"{path} holds no checkpoint (no {inner}, no manifest-N.json)")


def epoch_problem(
    directory: str | Path, epoch: int, required: Collection[str] = ()
) -> CheckpointError | None:
    """Why the checkpoint of ``epoch`` is not complete (the error naming the file), or None."""
    try:
        verify_manifest(directory, read_manifest(directory, epoch), required)
    except CheckpointError as error:
        return error
    return None


def is_complete(directory: str | Path, epoch: int, required: Collection[str] = ()) -> bool:
    """Whether the manifest of ``epoch`` parses and all its files verify (see module doc)."""
    problem = epoch_problem(directory, epoch, required)
    if problem is not None:
        _log.info("checkpoint of epoch %d is incomplete: %s", epoch, problem)
    return problem is None


def complete_epochs(directory: str | Path, required: Collection[str] = ()) -> list[int]:
    """The complete epochs in ``directory``, sorted; reads and hashes every listed file."""
    return [e for e in manifest_epochs(directory) if is_complete(directory, e, required)]


def latest_complete_epoch(directory: str | Path, required: Collection[str] = ()) -> int | None:
    """The newest complete epoch, or None; hashes only from the newest down to the first valid."""
    for epoch in reversed(manifest_epochs(directory)):
        if is_complete(directory, epoch, required):
            return epoch
    return None
