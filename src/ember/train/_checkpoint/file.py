"""Checkpoint files: one :class:`Record` per file, written atomically as safetensors.

A checkpoint file is a safetensors file (Burn writes ``.bpk``; ember never writes pickle). Its
tensors are the record's tensors; its string header ``__metadata__`` holds one JSON document under
the key ``"ember"``::

    {"format": "ember.checkpoint", "version": 1, "name": "model", "epoch": 3, "metadata": {...}}

``metadata`` is :attr:`Record.metadata`; ``name`` and ``epoch`` are checked on restore, so a file
copied under another epoch's name is refused. Loading parses the header with :mod:`json` and the
tensors with safetensors' ``load``: no code from the file is ever run. Only a regular file is read
(not a FIFO, a device or a link to one), and never more than its stated size
(:func:`read_regular`), so a file swapped for ``/dev/zero`` is refused, not read forever.

A record holding a NaN or an infinite value is refused before anything is written
(:func:`refuse_non_finite`): a checkpoint never holds weights a resume could not train from.

Every write goes through :func:`atomic_write` (temp file in the same directory, fsync, rename,
fsync of the directory), so a final path only ever holds a complete file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file as save_safetensors_file

from ember._checks import check_positive_int
from ember._errors import CheckpointError
from ember.train._checkpoint.record import Record
from ember.train._files import CheckpointFile, atomic_fill, atomic_write

__all__ = [
    "CheckpointFile",
    "Checkpointer",
    "FileCheckpointer",
    "atomic_write",
    "check_epoch",
    "checked_directory",
    "checkpoint_file_name",
    "read_metadata",
    "read_regular",
    "refuse_non_finite",
    "remove_stale_temps",
]

FORMAT = "ember.checkpoint"
VERSION = 1
SUFFIX = ".safetensors"
_HEADER_KEY = "ember"
_TEMP_RE = r"\.[0-9a-f]{16}\.tmp"
_MAX_HEADER_SIZE = 100_000_000  # safetensors refuses a bigger header too
MAX_FILE_SIZE = 1 << 40
"""The largest checkpoint file read without a manifest stating its size (1 TiB)."""


class Checkpointer(Protocol):
    """Saves, restores and deletes the record of an epoch (Burn's ``Checkpointer``)."""

    def save(self, epoch: int, record: Record) -> CheckpointFile | None:
        """Store ``record`` as the checkpoint of ``epoch``; file-backed ones say what they wrote."""
        ...

    def restore(self, epoch: int) -> Record:
        """The record stored for ``epoch``; :class:`CheckpointError` if missing or damaged."""
        ...

    def delete(self, epoch: int) -> None:
        """Remove the checkpoint of ``epoch``; a missing one is not an error."""
        ...


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


def checked_directory(directory: str | os.PathLike[str]) -> Path:
    """``directory`` as a path; ValueError if it exists and is not a directory. Nothing is
    created: a checkpointer makes its directory when it first writes, so that describing a run
    (``_plan.py``) writes nothing."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint directory {str(path)!r} exists and is not a directory")
    return path


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


def refuse_non_finite(tensors: dict[str, torch.Tensor], what: str) -> None:
    """CheckpointError naming the first tensor of ``tensors`` holding a NaN or an infinity.

    One fused reduction over all floating-point tensors (their max-norms, which a NaN or an
    infinity makes non-finite, in one ``foreach`` kernel and no copy), so a finite record, the
    usual case, costs one pass over its bytes; only a refused one is searched for the name.
    """
    floats = [t.detach() for t in tensors.values() if t.is_floating_point() and t.numel()]
    if not floats:
        return
    norms = torch._foreach_norm(floats, math.inf)
    if bool(torch.isfinite(torch.stack([norm.float() for norm in norms])).all()):
        return
    for key, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"{what} holds a non-finite value in tensor {key!r}: refused, nothing written "
                "(a NaN or infinite gradient or weight; the previous checkpoints are kept)"
            )


def remove_stale_temps(directory: Path, final_name_pattern: str) -> None:
    """Remove temp files that :func:`atomic_write` left for final names matching the regex."""
    temp = re.compile(rf"\.{final_name_pattern}{_TEMP_RE}")
    for entry in os.scandir(directory):
        if temp.fullmatch(entry.name) and entry.is_file(follow_symlinks=False):
            Path(entry.path).unlink(missing_ok=True)


class FileCheckpointer:
    """Stores each epoch's record in ``{directory}/{name}-{epoch}.safetensors``.

    ``save`` writes atomically and returns the :class:`CheckpointFile` it wrote (for a manifest);
    ``restore`` reads the file once, checks it against ``expected`` when given, and parses it
    without running code; ``delete`` removes the file (a missing one is fine). The directory is
    created by the first write.
    """

    def __init__(self, directory: str | os.PathLike[str], name: str) -> None:
        self._name = check_name(name)
        self._directory = checked_directory(directory)

    @property
    def directory(self) -> Path:
        """Where the files are."""
        return self._directory

    @property
    def name(self) -> str:
        """The file-name stem, e.g. ``"model"``."""
        return self._name

    def __repr__(self) -> str:
        return f"FileCheckpointer({str(self._directory)!r}, {self._name!r})"

    def path(self, epoch: int) -> Path:
        """``{directory}/{name}-{epoch}.safetensors``."""
        return self._directory / checkpoint_file_name(self._name, epoch)

    def save(self, epoch: int, record: Record) -> CheckpointFile:
        """Write ``record`` as epoch ``epoch`` atomically; return name, size and SHA-256 written.

        A record holding a non-finite value is refused (CheckpointError naming the tensor).
        """
        self.refuse_non_finite(epoch, record)
        return self.write(epoch, record)

    def refuse_non_finite(self, epoch: int, record: Record) -> None:
        """CheckpointError naming the file and the tensor if ``record`` holds a NaN or an inf."""
        refuse_non_finite(record.tensors, f"checkpoint {self.path(epoch).name}")

    def write(self, epoch: int, record: Record) -> CheckpointFile:
        """:meth:`save` without the finiteness check (for a caller that checked already)."""
        path = self.path(epoch)
        tensors, metadata = serializable(record, self._name, epoch)
        self._directory.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(self._directory, re.escape(self._name) + r"-[0-9]+" + re.escape(SUFFIX))

        def fill(temp: Path) -> None:
            try:
                save_safetensors_file(tensors, temp, metadata=metadata)
            except Exception as error:
                raise CheckpointError(
                    f"cannot serialize the tensors of checkpoint {self._name!r}: {error}"
                ) from error

        return atomic_fill(path, fill)

    def restore(self, epoch: int, expected: CheckpointFile | None = None) -> Record:
        """Read epoch ``epoch``'s record, verified by ``expected`` (size, SHA-256) if given."""
        path = self.path(epoch)
        if expected is not None and expected.name != path.name:
            raise ValueError(f"expected file {expected.name!r} is not {path.name!r}")
        size = None if expected is None else expected.size
        data = read_regular(path, "checkpoint file", size, limit=MAX_FILE_SIZE)
        if expected is not None:
            verify_bytes(path, data, expected)
        return deserialize(data, path, self._name, epoch)

    def delete(self, epoch: int) -> None:
        """Remove epoch ``epoch``'s file if it exists."""
        self.path(epoch).unlink(missing_ok=True)


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


def serializable(
    record: Record, name: str, epoch: int
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and the safetensors metadata (ember's JSON header document) of ``record``."""
    document = {
        "format": FORMAT,
        "version": VERSION,
        "name": name,
        "epoch": epoch,
        "metadata": record.metadata,
    }
    try:
        header = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as error:
        raise TypeError(f"the metadata of checkpoint {name!r} is not JSON: {error}") from error
    return _storable(record.tensors), {_HEADER_KEY: header}


def _storable(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, dense, contiguous tensors that share no memory, as safetensors requires."""
    result: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for key, tensor in tensors.items():
        value = tensor.detach()
        if value.device.type != "cpu" or not value.is_contiguous():
            value = value.to(device="cpu", memory_format=torch.contiguous_format, copy=True)
        if value.numel() > 0:
            pointer = value.untyped_storage().data_ptr()
            if pointer in storages:  # tied weights or views: safetensors refuses shared memory
                value = value.clone()
                pointer = value.untyped_storage().data_ptr()
            storages.add(pointer)
        result[key] = value
    return result


def deserialize(data: bytes, path: Path, name: str, epoch: int) -> Record:
    """Parse checkpoint bytes; CheckpointError naming ``path`` unless an ember checkpoint."""
    metadata = _checked_metadata(_read_document(data, path), path, name, epoch)
    try:
        tensors = load_safetensors(data)
    except Exception as error:
        raise CheckpointError(f"checkpoint file {path} has unreadable tensors: {error}") from error
    return Record(tensors=dict(tensors), metadata=metadata)


def read_metadata(path: Path, name: str, epoch: int) -> dict[str, Any]:
    """The record metadata of the checkpoint file ``path`` (``name`` of ``epoch``), read from
    its header alone (no tensor is read); CheckpointError naming ``path`` as :func:`deserialize`
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
    return _checked_metadata(_read_document(prefix + header, path), path, name, epoch)


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
