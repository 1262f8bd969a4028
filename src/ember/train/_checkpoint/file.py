"""Checkpoint files: one :class:`Record` per file, written atomically as safetensors.

A checkpoint file is a safetensors file whose tensors are the record's tensors and whose header
holds the record's metadata (the file names, the header and the guarded reads are the run
directory's format: ``ember/_rundir/checkpoints.py``). Loading parses the header with :mod:`json`
and the tensors with safetensors' ``load``: no code from the file is ever run.

A record holding a NaN or an infinite value is refused before anything is written
(:func:`refuse_non_finite`): a checkpoint never holds weights a resume could not train from.

Every write goes through ``atomic_fill`` (temp file in the same directory, fsync, rename,
fsync of the directory), so a final path only ever holds a complete file.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Protocol

import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file as save_safetensors_file

from ember._errors import CheckpointError
from ember._rundir.atomic import CheckpointFile, atomic_fill, remove_stale_temps
from ember._rundir.checkpoints import (
    MAX_FILE_SIZE,
    SUFFIX,
    check_name,
    checkpoint_file_name,
    read_header,
    read_regular,
    record_header,
    verify_bytes,
)
from ember.train._checkpoint.record import Record

__all__ = [
    "Checkpointer",
    "FileCheckpointer",
    "checked_directory",
    "deserialize",
    "refuse_non_finite",
    "serializable",
]


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


def checked_directory(directory: str | os.PathLike[str]) -> Path:
    """``directory`` as a path; ValueError if it exists and is not a directory. Nothing is
    created: a checkpointer makes its directory when it first writes, so that describing a run
    (``_plan.py``) writes nothing."""
    path = Path(directory)
    if path.exists() and not path.is_dir():
        raise ValueError(f"checkpoint directory {str(path)!r} exists and is not a directory")
    return path


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


def serializable(
    record: Record, name: str, epoch: int
) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors and the safetensors metadata (ember's JSON header document) of ``record``."""
    return _storable(record.tensors), record_header(record.metadata, name, epoch)


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
    metadata = read_header(data, path, name, epoch)
    try:
        tensors = load_safetensors(data)
    except Exception as error:
        raise CheckpointError(f"checkpoint file {path} has unreadable tensors: {error}") from error
    return Record(tensors=dict(tensors), metadata=metadata)
