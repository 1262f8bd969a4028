"""A run's weights as a Hugging Face model directory: ``ember export --format hf RUN -o DIR``.

A ``transformers`` model's checkpoints keep its configuration (``record.py``,
``TRANSFORMERS_CONFIG``). :func:`export_pretrained` writes an epoch's weights with it as the
directory ``save_pretrained`` would write, which ``from_pretrained(DIR)`` (and
``AutoModelFor...``) loads with nothing of ember installed::

    DIR/config.json          the model's configuration, its class in "architectures"
    DIR/model.safetensors    the weights under the model's state_dict() names ("format": "pt")

Safetensors only: nothing is pickled, nothing of ``transformers`` is imported to write it. The
directory appears whole or not at all (written beside it, then renamed into place). An export
never replaces what is there: ``DIR`` must be new or an empty directory, in a directory that
exists, and not inside a run's checkpoint directory.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from pathlib import Path

from safetensors.torch import save_file

from ember._errors import CheckpointError
from ember.train._checkpoint.export import (
    CheckpointEpoch,
    checkpoint_directory,
    checkpoint_holder,
    kind_of,
    read_model,
)
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._checkpoint.record import TRANSFORMERS_CONFIG
from ember.train._files import fsync_directory

__all__ = ["check_output_directory", "export_pretrained"]

_EXTRA = "$extra."  # model_record's prefix for tensors inside a module's extra state


def export_pretrained(
    directory: str | os.PathLike[str],
    output: str | os.PathLike[str],
    epoch: CheckpointEpoch = "best",
) -> int:
    """Write the weights of ``epoch`` of a run of a ``transformers`` model as a directory
    ``from_pretrained`` loads (see the module doc); returns the epoch number written.

    ``output`` must be a new or empty directory (``check_output_directory``).
    CheckpointError when the run's model is not a ``transformers`` model (its checkpoints
    hold no configuration: export its weights with :func:`export_weights`) or has non-tensor
    extra state.
    """
    path = check_output_directory(output)
    number, record = read_model(directory, epoch)
    config = record.metadata.get(TRANSFORMERS_CONFIG)
    if not isinstance(config, dict):
        raise CheckpointError(
            f"the model of epoch {number} is not a transformers model (its checkpoint holds no "
            "configuration): export its weights as one safetensors file instead, ember export "
            "RUN -o model.safetensors"
        )
    if record.metadata.get("extra_state"):
        names = sorted(record.metadata["extra_state"])
        raise CheckpointError(
            f"the model of epoch {number} has non-tensor extra state ({names}), which a "
            "safetensors file cannot hold"
        )
    tensors = {name: t for name, t in record.tensors.items() if not name.startswith(_EXTRA)}
    source = FileCheckpointer(checkpoint_directory(directory), "model").path(number)
    mode = stat.S_IMODE(os.stat(source).st_mode)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    temp.mkdir()
    try:
        (temp / "config.json").write_text(
            json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        weights = temp / "model.safetensors"
        save_file(tensors, str(weights), metadata={"format": "pt"})
        os.chmod(weights, mode)
        for name in ("config.json", "model.safetensors"):
            with (temp / name).open("rb") as handle:
                os.fsync(handle.fileno())
        fsync_directory(temp)
        os.replace(temp, path)  # an empty directory there is replaced, all at once
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync_directory(path.parent)
    return number


def check_output_directory(output: str | os.PathLike[str]) -> Path:
    """``output`` as a directory an export may write; ValueError naming it otherwise: it
    exists and is not an empty directory (nothing is ever replaced), its parent does not
    exist (a typo is not created silently), or it lies inside a run's checkpoint directory."""
    path = Path(output)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISDIR(info.st_mode):
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else kind_of(info.st_mode)
        raise ValueError(
            f"output {str(path)!r} exists and is {kind}, not a directory: refused (name a new "
            "directory, or an empty one)"
        )
    if info is not None and any(path.iterdir()):
        raise ValueError(
            f"output {str(path)!r} is a directory that is not empty: refused, an export never "
            "replaces files (name a new directory, or an empty one)"
        )
    parent = path.absolute().parent
    if not parent.is_dir():
        raise ValueError(
            f"the directory of output {str(path)!r} does not exist ({parent}): create it "
            "first, or name a directory in one that exists"
        )
    holder = checkpoint_holder(path.absolute().resolve())
    if holder is not None:
        raise ValueError(
            f"output {str(path)!r} is inside the checkpoint directory {holder} of a run: "
            "refused, an export never writes among checkpoints (write it beside the run, "
            "e.g. RUN/hf)"
        )
    return path
