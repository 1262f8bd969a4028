"""A checkpoint directory's files: their names, ember's header in each, and how they are read.

A round's checkpoint is its record files, ``{model,optim,scheduler,state}-{epoch}.safetensors``
(:data:`RECORDS`), and a manifest (``manifest.py``), in the checkpoint directory; a mid-round
checkpoint, taken at optimizer step ``k``, is the same files in ``step-{k}/`` beside them
(:func:`step_directories`). A checkpoint file is ``{name}-{epoch}.safetensors`` (Burn's naming;
Burn writes ``.bpk``, ember never writes pickle). Its safetensors string header ``__metadata__``
holds one JSON document under the key ``"ember"``::

    {"format": "ember.checkpoint", "version": 1, "name": "model", "epoch": 3, "metadata": {...}}

``metadata`` is the record's (``Record.metadata``); ``name`` and ``epoch`` are checked on read, so a
file copied under another epoch's name is refused. The header is parsed with :mod:`json`, never
anything that runs code. Only a regular file is read (not a FIFO, a device or a link to one), and
never more than its stated size (:func:`read_regular`), so a file swapped for ``/dev/zero`` is
refused, not read forever. Every problem is a :class:`~ember.CheckpointError` naming the file.

The tensors, and the records they make, are the training layer's
(``ember/train/_checkpoint/file.py``); the manifests listing a checkpoint's files are
``manifest.py``'s.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from ember._checks import check_positive_int
from ember._errors import CheckpointError
from ember._rundir.atomic import CheckpointFile

__all__ = [
    "MAX_FILE_SIZE",
    "RECORDS",
    "SUFFIX",
    "check_epoch",
    "check_name",
    "checkpoint_file_name",
    "mid_round_directory",
    "read_header",
    "read_metadata",
    "read_regular",
    "record_header",
    "regular_size",
    "step_directories",
    "verify_bytes",
]

FORMAT = "ember.checkpoint"
VERSION = 1
SUFFIX = ".safetensors"
_HEADER_KEY = "ember"
_MAX_HEADER_SIZE = 100_000_000  # safetensors refuses a bigger header too
MAX_FILE_SIZE = 1 << 40
"""The largest checkpoint file read without a manifest stating its size (1 TiB)."""
RECORDS = ("model", "optim", "scheduler", "state")
"""The record files of a checkpoint, by name, as ember's checkpointer writes them."""
_STEP_DIRECTORY = re.compile(r"step-([1-9][0-9]*)")


def check_epoch(epoch: object) -> int:
    """``epoch`` if it is an int >= 1, else TypeError/ValueError naming it."""
    return check_positive_int("epoch", epoch)


def check_name(name: object) -> str:
    """``name`` if it can be a file-name stem, else ValueError naming it."""
    if not isinstance(name, str) or not name or name in {".", ".."}:
        raise ValueError(f"checkpoint name must be a non-empty file-name stem, got {name!r}")
    separators = {"/", "\\", "\0", os.sep} | ({os.altsep} if os.altsep else set())
    if any(sep in name for sep in separators):
        raise ValueError(f"checkpoint name must not contain a path separator, got {name!r}")
    return name


def checkpoint_file_name(name: str, epoch: int) -> str:
    """``{name}-{epoch}.safetensors``, the file name of a checkpoint (Burn's scheme)."""
    return f"{check_name(name)}-{check_epoch(epoch)}{SUFFIX}"


def mid_round_directory(directory: Path, step: int) -> Path:
    """``{directory}/step-{step}``, where the mid-round checkpoint at ``step`` is."""
    return directory / f"step-{step}"


def step_directories(directory: Path) -> dict[int, Path]:
    """The directories of mid-round checkpoints in ``directory`` (``step-{k}``), by step."""
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        match = _STEP_DIRECTORY.fullmatch(path.name)
        if match and path.is_dir() and not path.is_symlink():
            found[int(match.group(1))] = path
    return dict(sorted(found.items()))


def regular_size(path: Path, what: str) -> int:
    """The size of ``path`` (links followed) if it is a regular file; CheckpointError otherwise.

    ``what`` names the file in messages (``"checkpoint file"``). A FIFO would block a read and a
    device such as ``/dev/zero`` never ends: neither is ever opened.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise CheckpointError(f"{what} {path} is missing") from None
    except OSError as error:
        raise CheckpointError(f"{what} {path} cannot be read: {error}") from error
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(
            f"{what} {path} is not a regular file (a FIFO, a device or a link to one): refused"
        )
    return info.st_size


def read_regular(path: Path, what: str, size: int | None = None, *, limit: int) -> bytes:
    """The bytes of the regular file ``path``: exactly ``size`` of them when given, and never
    more than ``limit``; CheckpointError naming ``what`` and ``path`` otherwise."""
    actual = regular_size(path, what)
    if size is not None and actual != size:
        raise CheckpointError(
            f"{what} {path} is damaged: its size is {actual} bytes, expected {size} bytes"
        )
    if actual > limit:
        raise CheckpointError(f"{what} {path} is {actual} bytes, more than {limit} bytes")
    try:
        with path.open("rb") as handle:
            data = handle.read(actual + 1)  # one byte more: a file that grew is refused
    except OSError as error:
        raise CheckpointError(f"{what} {path} cannot be read: {error}") from error
    if len(data) != actual:
        raise CheckpointError(f"{what} {path} changed size while it was read")
    return data


def verify_bytes(path: Path, data: bytes, expected: CheckpointFile) -> None:
    """CheckpointError naming ``path`` when ``data`` differs from ``expected`` in size or hash."""
    if len(data) != expected.size:
        raise CheckpointError(
            f"checkpoint file {path} is damaged: its size is {len(data)} bytes, "
            f"expected {expected.size} bytes"
        )
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected.sha256:
        raise CheckpointError(
            f"checkpoint file {path} is damaged: its SHA-256 is {actual}, "
            f"expected {expected.sha256}"
        )


def record_header(metadata: dict[str, Any], name: str, epoch: int) -> dict[str, str]:
    """The safetensors string header of the checkpoint ``name`` of ``epoch`` whose record holds
    ``metadata``; TypeError when ``metadata`` is not JSON."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "epoch": epoch,
        "metadata": metadata,
    }
    try:
        header = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise TypeError(f"the metadata of checkpoint {name!r} is not JSON: {error}") from error
    return {_HEADER_KEY: header}


def read_header(data: bytes, path: Path, name: str, epoch: int) -> dict[str, Any]:
    """The record metadata in the header of ``data``, the bytes of the checkpoint file ``path``
    (``name`` of ``epoch``); CheckpointError naming ``path`` unless it is an ember checkpoint of
    that name and epoch."""
    return _checked_metadata(_read_document(data, path), path, name, epoch)


def read_metadata(path: Path, name: str, epoch: int) -> dict[str, Any]:
    """The record metadata of the checkpoint file ``path`` (``name`` of ``epoch``), read from
    its header alone (no tensor is read); CheckpointError naming ``path`` as :func:`read_header`
    does."""
    size = regular_size(path, "checkpoint file")
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            length = int.from_bytes(prefix, "little") if len(prefix) == 8 else 0
            if length > _MAX_HEADER_SIZE:
                raise CheckpointError(
                    f"checkpoint file {path} is not a safetensors file: its header claims "
                    f"{length} bytes, more than {_MAX_HEADER_SIZE}"
                )
            header = handle.read(min(length, max(size - 8, 0)))
    except OSError as error:
        raise CheckpointError(f"checkpoint file {path} cannot be read: {error}") from error
    return read_header(prefix + header, path, name, epoch)


def _checked_metadata(
    document: dict[str, Any], path: Path, name: str, epoch: int
) -> dict[str, Any]:
    """The ``metadata`` of an ember header ``document`` that is ``name`` of ``epoch``."""
    if document.get("format") != FORMAT or document.get("version") != VERSION:
        raise CheckpointError(
            f"checkpoint file {path} has format {document.get('format')!r} version "
            f"{document.get('version')!r}, expected {FORMAT!r} version {VERSION}"
        )
    if document.get("name") != name or document.get("epoch") != epoch:
        raise CheckpointError(
            f"checkpoint file {path} holds {document.get('name')!r} of epoch "
            f"{document.get('epoch')!r}, expected {name!r} of epoch {epoch}"
        )
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise CheckpointError(f"checkpoint file {path} has no metadata object")
    return metadata


def _read_document(data: bytes, path: Path) -> dict[str, Any]:
    """The JSON document stored under ``"ember"`` in the safetensors header of ``data``."""
    if len(data) < 8:
        raise CheckpointError(f"checkpoint file {path} is truncated: {len(data)} bytes")
    length = int.from_bytes(data[:8], "little")
    if length > len(data) - 8:
        raise CheckpointError(
            f"checkpoint file {path} is not a safetensors file or is truncated: its header "
            f"claims {length} bytes, the file has {len(data) - 8} after the length"
        )
    try:
        header = json.loads(data[8 : 8 + length])
        metadata = header["__metadata__"]
        document = json.loads(metadata[_HEADER_KEY])
    except RecursionError:
        raise CheckpointError(
            f"checkpoint file {path} has no valid ember header: it is nested too deeply"
        ) from None
    except (ValueError, TypeError, KeyError) as error:
        raise CheckpointError(
            f"checkpoint file {path} has no valid ember header: {type(error).__name__}: {error}"
        ) from None
    if not isinstance(document, dict):
        raise CheckpointError(f"checkpoint file {path} has no valid ember header")
    return document
