"""The best epoch of a run: the one its checkpointing strategy keeps for its metric.

The checkpointer saves the strategy's state with every checkpoint, in the state file's metadata
under ``"checkpointing_strategy"`` (``ember/train/_checkpoint/learning.py``): a
``MetricCheckpointingStrategy``'s ``current`` (also inside a ``ComposedCheckpointingStrategy``'s
``strategies``) is the epoch it keeps. The newest checkpoint whose state file verifies against
its manifest (size and SHA-256) says it; only its header is parsed (the tensors hold nothing of
it), never anything that runs code. ``LearningResult.best_epoch``, ``ember export --epoch best``,
the ``model`` artifact and ``ember.runs`` read it here.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from ember._errors import CheckpointError
from ember._rundir.checkpoints import (
    MAX_FILE_SIZE,
    checkpoint_file_name,
    read_header,
    read_regular,
    verify_bytes,
)
from ember._rundir.manifest import (
    checkpoint_directory,
    manifest_epochs,
    manifest_path,
    read_manifest,
)

__all__ = ["STRATEGY_STATE_KEY", "best_epoch"]

STRATEGY_STATE_KEY = "checkpointing_strategy"
"""Where the state file's metadata holds the checkpointing strategy's state."""

log = logging.getLogger("ember.train")


def best_epoch(directory: str | os.PathLike[str]) -> int | None:
    """The epoch the checkpointing strategy keeps as best, from the state saved with the newest
    checkpoint whose state file verifies; None when no metric strategy was used or there is no
    checkpoint (``directory``: a run directory or its checkpoint directory). Only state files
    are read (the model files are verified when loaded)."""
    checkpoints = checkpoint_directory(directory)
    for epoch in reversed(manifest_epochs(checkpoints)):
        try:
            metadata = _state_metadata(checkpoints, epoch)
        except CheckpointError as error:  # damaged or half-deleted: an older one may do
            log.info("checkpoint of epoch %d has no readable state: %s", epoch, error)
            continue
        return _kept_best(metadata.get(STRATEGY_STATE_KEY))
    return None


def _state_metadata(checkpoints: Path, epoch: int) -> dict[str, Any]:
    """The metadata of the state file of ``epoch``, verified against its manifest."""
    manifest = read_manifest(checkpoints, epoch)  # names the manifest when missing or damaged
    name = checkpoint_file_name("state", epoch)
    expected = manifest.file(name)
    if expected is None:
        raise CheckpointError(
            f"checkpoint manifest {manifest_path(checkpoints, epoch)} does not list {name}"
        )
    path = checkpoints / name
    data = read_regular(path, "checkpoint file", expected.size, limit=MAX_FILE_SIZE)
    verify_bytes(path, data, expected)
    return read_header(data, path, "state", epoch)


def _kept_best(state: Any) -> int | None:
    """``current`` of the first ``MetricCheckpointingStrategy`` state in ``state``."""
    if not isinstance(state, dict):
        return None
    if state.get("strategy") == "MetricCheckpointingStrategy":
        current = state.get("current")
        return current if isinstance(current, int) and current >= 1 else None
    for inner in state.get("strategies", ()) or ():
        found = _kept_best(inner)
        if found is not None:
            return found
    return None
