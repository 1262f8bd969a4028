"""A run's checkpoints after training: which epochs, which is best, its weights in a model or in
one plain safetensors file.

``directory`` is a run directory (its checkpoints are in ``directory/checkpoint``) or a checkpoint
directory itself. An epoch is named as ``"last"`` (the newest complete one), ``"best"`` (the one
the checkpointing strategy's metric strategy keeps: ``ember/_rundir/best_epoch.py``) or its
number. Every file is verified against its epoch's manifest (size and
SHA-256) before use and parsed without running code from it.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Any, Literal, TypeVar

from safetensors.torch import save_file
from torch import nn

from ember._errors import CheckpointError
from ember._rundir.atomic import atomic_fill
from ember._rundir.best_epoch import best_epoch
from ember._rundir.checkpoints import check_epoch
from ember._rundir.manifest import (
    checkpoint_directory,
    latest_complete_epoch,
    manifest_epochs,
    manifest_path,
    read_manifest,
)
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._checkpoint.record import Record, load_model_record
from ember.train._checkpoint.shard_index import check_index_size
from ember.train._checkpoint.sharded import consolidate, is_sharded

__all__ = [
    "CheckpointEpoch",
    "check_checkpoint_epoch",
    "check_output",
    "checkpoint_holder",
    "export_weights",
    "kind_of",
    "load_checkpoint",
    "model_checkpoints",
    "read_model",
    "resolve_epoch",
]

M = TypeVar("M", bound=nn.Module)
CheckpointEpoch = int | Literal["best", "last"]
"""An epoch of a run's checkpoints: its number, ``"best"`` or ``"last"``."""

log = logging.getLogger("ember.train")
_EXTRA = "$extra."  # model_record's prefix for tensors inside a module's extra state


def model_checkpoints(directory: str | os.PathLike[str]) -> dict[int, Path]:
    """The model file of every epoch that has a manifest, by epoch (not hashed here: loading
    verifies)."""
    checkpoints = checkpoint_directory(directory)
    return {
        epoch: checkpoints / f"model-{epoch}.safetensors" for epoch in manifest_epochs(checkpoints)
    }


def resolve_epoch(directory: str | os.PathLike[str], epoch: CheckpointEpoch) -> int:
    """The epoch number ``epoch`` names; CheckpointError saying what exists otherwise."""
    checkpoints = checkpoint_directory(directory)
    if epoch == "last":
        latest = latest_complete_epoch(checkpoints, ("model",))
        if latest is None:
            raise CheckpointError(f"no complete checkpoint in {checkpoints}")
        return latest
    if epoch == "best":
        best = best_epoch(checkpoints)
        if best is None:
            raise CheckpointError(
                f"no best epoch in {checkpoints}: the run kept no epoch for a metric (use a "
                "MetricCheckpointingStrategy, the default's Loss one, or name the epoch)"
            )
        return best
    number = check_epoch(check_checkpoint_epoch(epoch))
    if not manifest_path(checkpoints, number).exists():
        raise CheckpointError(
            f"no checkpoint of epoch {number} in {checkpoints} (no "
            f"{manifest_path(checkpoints, number).name}); checkpointed epochs: "
            f"{manifest_epochs(checkpoints)}"
        )
    return number


def check_checkpoint_epoch(epoch: Any) -> Any:
    """``epoch`` if it is ``"best"``, ``"last"``, an epoch number or None; else the error."""
    if epoch is None or epoch in ("best", "last"):
        return epoch
    if isinstance(epoch, str):
        raise ValueError(f"epoch must be 'best', 'last' or an epoch number, got {epoch!r}")
    return check_epoch(epoch)


def read_model(directory: str | os.PathLike[str], epoch: CheckpointEpoch) -> tuple[int, Record]:
    """The epoch number and the verified model record of ``epoch`` (a sharded checkpoint's
    shards consolidated into whole tensors)."""
    checkpoints = checkpoint_directory(directory)
    number = resolve_epoch(checkpoints, epoch)
    record = _read(checkpoints, "model", number)
    if is_sharded(record):
        record = consolidate(checkpoints, number, record)
    return number, record


def _read(checkpoints: Path, name: str, epoch: int) -> Record:
    manifest = read_manifest(checkpoints, epoch)  # names the manifest when missing or damaged
    check_index_size(checkpoints, manifest, name)
    file = FileCheckpointer(checkpoints, name)
    expected = manifest.file(file.path(epoch).name)
    if expected is None:
        raise CheckpointError(
            f"checkpoint manifest {manifest_path(checkpoints, epoch)} does not list "
            f"{file.path(epoch).name}"
        )
    return file.restore(epoch, expected)  # verified against the manifest's size and SHA-256


def load_checkpoint(
    directory: str | os.PathLike[str], epoch: CheckpointEpoch = "best", *, into: M
) -> M:
    """Copy the weights of ``epoch`` (``"best"``, ``"last"`` or a number) of a run into ``into``
    and return it. The file is verified first; a model whose state does not fit gets
    CheckpointError naming the file and the first tensor that differs, and is left unchanged."""
    if not isinstance(into, nn.Module):
        raise TypeError(f"into must be a torch.nn.Module, got {type(into).__name__}")
    checkpoints = checkpoint_directory(directory)
    number, record = read_model(checkpoints, epoch)
    try:
        load_model_record(into, record)
    except CheckpointError as error:
        path = FileCheckpointer(checkpoints, "model").path(number)
        raise CheckpointError(f"checkpoint file {path}: {error}") from None
    return into


def export_weights(
    directory: str | os.PathLike[str],
    output: str | os.PathLike[str],
    epoch: CheckpointEpoch = "best",
) -> int:
    """Write the weights of ``epoch`` as one plain safetensors file at ``output`` (atomically)
    whose keys are the model's ``state_dict()`` keys; returns the epoch number written.

    ``safetensors.torch.load_file(output)`` then ``model.load_state_dict(...)`` loads it with
    nothing of ember installed. A model with non-tensor extra state cannot be exported so.
    ``output`` must be a new file or a regular file to replace, in a directory that exists and
    is not a run's checkpoint directory (see ``check_output``); it gets the mode of the
    checkpoint file it comes from.
    """
    path = check_output(output)
    number, record = read_model(directory, epoch)
    if record.metadata.get("extra_state"):
        names = sorted(record.metadata["extra_state"])
        raise CheckpointError(
            f"the model of epoch {number} has non-tensor extra state ({names}), which a plain "
            "safetensors file cannot hold; load it with ember.train.load_checkpoint instead"
        )
    tensors = {name: t for name, t in record.tensors.items() if not name.startswith(_EXTRA)}
    source = FileCheckpointer(checkpoint_directory(directory), "model").path(number)
    mode = stat.S_IMODE(os.stat(source).st_mode)

    def fill(temp: Path) -> None:
        save_file(tensors, str(temp), metadata={"format": "pt"})
        os.chmod(temp, mode)

    atomic_fill(path, fill)
    return number


def check_output(output: str | os.PathLike[str]) -> Path:
    """``output`` as a path an export may write; ValueError naming it otherwise.

    The atomic write replaces whatever the name points at, so a name that exists and is not a
    regular file (a directory, a link, a FIFO, a device such as ``/dev/null``) is refused, as is
    any path inside a run's checkpoint directory (an export must never replace or add to a
    checkpoint) and a path whose directory does not exist (a typo is not created silently).
    """
    path = Path(output)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise ValueError(
            f"output {str(path)!r} exists and is {kind_of(info.st_mode)}, not a regular file: "
            "refused (name a new file, or a regular file to replace)"
        )
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ValueError(
            f"the directory of output {str(path)!r} does not exist ({parent}): create it "
            "first, or name a file in a directory that exists"
        )
    holder = checkpoint_holder(parent.resolve())
    if holder is not None:
        raise ValueError(
            f"output {str(path)!r} is inside the checkpoint directory {holder} of a run: "
            "refused, an export never writes among checkpoints (write it beside the run, "
            "e.g. RUN/model.safetensors)"
        )
    return path


def kind_of(mode: int) -> str:
    """What a file of ``mode`` that is not a regular file is, for a message."""
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "a special file")


def checkpoint_holder(directory: Path) -> Path | None:
    """The first of ``directory`` and its parents that holds checkpoint manifests (a run's
    ``checkpoint/``, or a ``step-N/`` inside it), or None."""
    for candidate in (directory, *directory.parents):
        try:
            if manifest_epochs(candidate):
                return candidate
        except OSError:  # a directory one may not list holds nothing this export can harm
            continue
    return None
