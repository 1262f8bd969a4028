"""A run's weights as a Hugging Face model directory: ``ember export --format hf RUN -o DIR``.

A ``transformers`` model's checkpoints keep its configurations (``record.py``,
``transformers_metadata``). :func:`export_pretrained` writes an epoch's weights with them as the
directory ``save_pretrained`` would write, which ``from_pretrained(DIR)`` (and
``AutoModelFor...``) loads with nothing of ember installed; given a tokenizer, it goes beside
them, as ``Trainer.save_model`` writes it::

    DIR/config.json             the model's configuration, its class in "architectures"
    DIR/generation_config.json  a generative model's generation_config (the checkpoint's)
    DIR/model.safetensors       the weights under the model's state_dict() names ("format": "pt")
    DIR/tokenizer.json ...      the tokenizer's save_pretrained files (tokenizer_config.json, ...)

Safetensors and JSON only: nothing is pickled, nothing of ``transformers`` is imported to write
the model, and a tokenizer directory is loaded without running code from it. The directory
appears whole or not at all (written beside it, tokenizer included, then renamed into place). An
export never replaces what is there: ``DIR`` must be new or an empty directory, in a directory
that exists, and not inside a run's checkpoint directory.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors.torch import save_file

from ember._errors import CheckpointError
from ember._rundir.atomic import fsync_directory
from ember._rundir.manifest import checkpoint_directory
from ember.train._checkpoint.export import (
    CheckpointEpoch,
    checkpoint_holder,
    kind_of,
    read_model,
)
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._checkpoint.record import (
    TRANSFORMERS_CONFIG,
    TRANSFORMERS_GENERATION_CONFIG,
    Record,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

__all__ = ["check_output_directory", "export_pretrained"]

_EXTRA = "$extra."  # model_record's prefix for tensors inside a module's extra state


def export_pretrained(
    directory: str | os.PathLike[str],
    output: str | os.PathLike[str],
    epoch: CheckpointEpoch = "best",
    *,
    tokenizer: PreTrainedTokenizerBase | str | os.PathLike[str] | None = None,
) -> int:
    """Write the weights of ``epoch`` of a run of a ``transformers`` model as a directory
    ``from_pretrained`` loads (see the module doc); returns the epoch number written.

    ``tokenizer`` (a ``transformers`` tokenizer, or the directory ``save_pretrained`` wrote it
    to) joins the directory, for ``AutoTokenizer.from_pretrained(output)``. A generative model's
    ``generation_config`` as the checkpoint recorded it becomes ``generation_config.json``
    (checkpoints of ember before 0.3 hold none: ``from_pretrained`` then derives it from
    ``config.json``, as for any model saved without one).

    ``output`` must be a new or empty directory (``check_output_directory``).
    CheckpointError when the run's model is not a ``transformers`` model (its checkpoints
    hold no configuration: export its weights with :func:`export_weights`) or has non-tensor
    extra state; ValueError for a tokenizer directory that holds no tokenizer.
    """
    path = check_output_directory(output)
    saved = None if tokenizer is None else _load_tokenizer(tokenizer)  # before the weights' read
    number, record = read_model(directory, epoch)
    configs = _configs(number, record)
    tensors = {name: t for name, t in record.tensors.items() if not name.startswith(_EXTRA)}
    source = FileCheckpointer(checkpoint_directory(directory), "model").path(number)
    mode = stat.S_IMODE(os.stat(source).st_mode)
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    temp.mkdir()
    try:
        if saved is not None:  # first: the model's own files are the ones a name clash keeps
            saved.save_pretrained(temp)
        for name, content in configs.items():
            (temp / name).write_text(
                json.dumps(content, indent=2, sort_keys=True) + "\n", encoding="utf-8"
            )
        weights = temp / "model.safetensors"
        save_file(tensors, str(weights), metadata={"format": "pt"})
        os.chmod(weights, mode)
        _fsync_tree(temp)
        os.replace(temp, path)  # an empty directory there is replaced, all at once
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
    fsync_directory(path.parent)
    return number


def _configs(number: int, record: Record) -> dict[str, Any]:
    """The JSON files of the model record of epoch ``number``, by name; CheckpointError when it
    is not the record of a ``transformers`` model a safetensors file can hold."""
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
    generation = record.metadata.get(TRANSFORMERS_GENERATION_CONFIG)
    if not isinstance(generation, dict):
        return {"config.json": config}
    return {"config.json": config, "generation_config.json": generation}


def _load_tokenizer(
    tokenizer: PreTrainedTokenizerBase | str | os.PathLike[str],
) -> PreTrainedTokenizerBase:
    """``tokenizer`` itself, or the tokenizer saved in the directory it names, loaded from local
    files only and without running code from them; ValueError naming a path that is not such a
    directory, TypeError for anything else, ImportError without ``transformers``."""
    try:
        from transformers import AutoTokenizer, PreTrainedTokenizerBase
    except ImportError as error:
        raise ImportError(
            "exporting a tokenizer needs transformers: pip install ember[hf]"
        ) from error
    if isinstance(tokenizer, PreTrainedTokenizerBase):
        return tokenizer
    if not isinstance(tokenizer, str | os.PathLike):
        raise TypeError(
            "tokenizer must be a transformers tokenizer or the directory of a saved one, got "
            f"{type(tokenizer).__name__}"
        )
    path = Path(tokenizer)
    if not path.is_dir():  # a name that is not a directory would be looked up on the Hub
        raise ValueError(
            f"tokenizer {str(path)!r} is not a directory: name the directory "
            "tokenizer.save_pretrained(DIR) wrote"
        )
    try:
        loaded: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
            path, local_files_only=True, trust_remote_code=False
        )
    except Exception as error:
        # what a malformed file makes transformers raise varies (OSError, ValueError, KeyError,
        # AttributeError; tokenizers' parser a bare Exception): each is this one mistake, named
        raise ValueError(
            f"tokenizer {str(path)!r} holds no tokenizer transformers loads without running "
            f"code ({error}): name the directory tokenizer.save_pretrained(DIR) wrote"
        ) from error
    return loaded


def _fsync_tree(directory: Path) -> None:
    """Flush every file and directory under ``directory`` to disk (before it is renamed into
    place, so that a power loss after the rename finds it whole)."""
    for root, _, files in os.walk(directory):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                os.fsync(handle.fileno())
        fsync_directory(Path(root))


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
