"""What a training checkpoint holds and how a run is put back from it (exact resume).

Besides the model, the optimizer and the scheduler, ember saves what an exact resume needs and
Burn does not keep: the RNG states of torch, numpy and Python (of every process of the run), every
loader's position and shuffle stream, the early-stopping state and (through the checkpointer)
the checkpointing strategy's state. A run resumed at an epoch boundary therefore ends with
exactly the weights, optimizer state and metric logs of a run that was never interrupted.

The state record's metadata::

    {"format": "ember.training-state", "epoch": e,
     "loop": {"optimizer_steps": steps taken so far, "grad_scaler": <its state> (16-mixed)},
     "rng": <this process's RNG state>, "ranks_rng": [<rank 0's>, <rank 1's>, ...],
     "loaders": {"train": <state>, "valid": <state>, ...},
     "early_stopping": <its state_dict()>,            (when early stopping is set)
     "user": {name: <state_dict() of with_stateful(name, ...)>}}   (tensors in the record)

How the run ended is recorded beside the checkpoints in ``run-end.json`` (:data:`RUN_END`)::

    {"format": "ember.run-end", "epoch": e, "num_epochs": n, "stop_reason": reason | null}

written when a run finished (``num_epochs`` reached, or early stopping) and removed when a run
starts training, so ``resume_latest()`` can tell a complete run from an interrupted one: it
trusts the record only when its epoch is the newest complete checkpoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ember._errors import CheckpointError
from ember.data import DataLoader
from ember.train._checkpoint.file import atomic_write
from ember.train._checkpoint.learning import RunCheckpointer, TrainingRecords
from ember.train._checkpoint.record import (
    Record,
    decode,
    encode,
    load_model_record,
    load_optimizer_record,
    load_optimizers_record,
    model_record,
    optimizer_record,
    optimizers_record,
    state_record,
)
from ember.train._checkpoint.rng import set_rng_state
from ember.train._checkpoint.sharded import ShardedRecords, has_shards, is_sharded, load_shards
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._hooks import Stateful
from ember.train._learner import Learner

__all__ = [
    "RUN_END",
    "RunEnd",
    "clear_run_end",
    "loop_count",
    "read_run_end",
    "restore_run",
    "snapshot_run",
]

_FORMAT = "ember.training-state"
_END_FORMAT = "ember.run-end"
RUN_END = "run-end.json"
"""The file, in the checkpoint directory, that records how a finished run ended."""
log = logging.getLogger("ember.train")


def snapshot_run(
    epoch: int,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
    rng_states: Sequence[dict[str, Any]],
    early_stopping: EarlyStoppingStrategy | None,
    loop: dict[str, Any],
    user: Mapping[str, Stateful],
    shards: ShardedRecords | None = None,
) -> TrainingRecords:
    """The records of the run after ``epoch``; ``rng_states`` are every process's, in rank order.
    ``shards``: a sharded model's index records and files, already written by every rank."""
    state: dict[str, Any] = {
        "format": _FORMAT,
        "epoch": epoch,
        "loop": loop,
        "rng": rng_states[0],
        "loaders": {name: loader.state_dict() for name, loader in loaders.items()},
    }
    if len(rng_states) > 1:
        state["ranks_rng"] = list(rng_states)
    if early_stopping is not None:
        state["early_stopping"] = early_stopping.state_dict()
    record = state_record(state)
    if user:
        tensors: dict[str, torch.Tensor] = {}
        states = {name: stateful.state_dict() for name, stateful in user.items()}
        metadata = {**record.metadata, "user": encode(states, "user", tensors)}
        record = Record(tensors=tensors, metadata=metadata)
    scheduler = state_record(
        {} if learner.lr_scheduler is None else learner.lr_scheduler.state_dict()
    )
    if shards is not None:
        return TrainingRecords(shards.model, shards.optim, scheduler, record, shards.files)
    return TrainingRecords(
        model_record(learner.model),
        optimizers_record(learner.optimizers)
        if learner.several_optimizers
        else optimizer_record(learner.optimizer),
        scheduler,
        record,
    )


def restore_run(
    checkpointer: RunCheckpointer,
    epoch: int,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
    early_stopping: EarlyStoppingStrategy | None,
    rank: int = 0,
    user: Mapping[str, Stateful] | None = None,
) -> dict[str, Any]:
    """Put the run back as it was after ``epoch`` (verified; never runs code); returns the
    loop's own state saved with it (``{}`` for a checkpoint written before ember kept it).

    ``rank`` picks this process's RNG state from a checkpoint of several processes; a
    checkpoint of fewer processes continues from rank 0's (a warning says the run then differs
    from an uninterrupted one).
    """
    records = checkpointer.restore(epoch)
    state = records.state.metadata
    if state.get("format") != _FORMAT or state.get("epoch") != epoch:
        raise CheckpointError(
            f"the state file of epoch {epoch} in {checkpointer.directory} is not an "
            f"ember training state for that epoch (format {state.get('format')!r}, "
            f"epoch {state.get('epoch')!r})"
        )
    if is_sharded(records.model):  # any world size, into a sharded model or a plain one
        load_shards(checkpointer.directory, epoch, learner, records.model, records.optim)
    elif has_shards(learner.model):
        raise CheckpointError(
            f"the checkpoint of epoch {epoch} in {checkpointer.directory} is not sharded: a "
            "FullyShardedDataParallel run resumes from a sharded checkpoint (load the weights "
            "into the plain model before the run instead)"
        )
    else:
        load_model_record(learner.model, records.model)
        if learner.several_optimizers:
            load_optimizers_record(learner.optimizers, records.optim)
        else:
            load_optimizer_record(learner.optimizer, records.optim)
    if learner.lr_scheduler is not None:
        learner.lr_scheduler.load_state_dict(dict(records.scheduler.metadata))
    saved_loaders = state.get("loaders", {})
    for name, loader in loaders.items():
        if name not in saved_loaders:
            raise CheckpointError(f"the checkpoint of epoch {epoch} has no {name} loader")
        loader.load_state_dict(saved_loaders[name])
    if early_stopping is not None and "early_stopping" in state:
        early_stopping.load_state_dict(state["early_stopping"])
    if user:
        saved = decode(state.get("user", {}), records.state.tensors, "the checkpoint's user state")
        for name, stateful in user.items():
            if name not in saved:
                raise CheckpointError(
                    f"the checkpoint of epoch {epoch} in {checkpointer.directory} holds no state "
                    f"named {name!r} (it has {sorted(saved)})"
                )
            stateful.load_state_dict(saved[name])
    try:
        set_rng_state(_rng_of(state, rank, epoch))
    except CheckpointError as error:
        raise CheckpointError(
            f"the state file of epoch {epoch} in {checkpointer.directory} holds a {error}"
        ) from None
    loop = state.get("loop", {})
    if not isinstance(loop, dict):
        raise CheckpointError(
            f"the state file of epoch {epoch} in {checkpointer.directory} holds a loop state "
            f"that is not a mapping: {loop!r}"
        )
    return loop


def loop_count(loop: Mapping[str, Any], key: str, default: int, where: str) -> int:
    """The count ``key`` of a loop state (``default`` in a checkpoint older than it); a
    CheckpointError naming ``where`` and the value if it is not a count."""
    value = loop.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{where} holds {key}={value!r}, not a count")
    return value


def _rng_of(state: Mapping[str, Any], rank: int, epoch: int) -> Any:
    ranks = state.get("ranks_rng") or [state["rng"]]
    if rank < len(ranks):
        return ranks[rank]
    log.warning(
        "the checkpoint of epoch %d holds the RNG states of %d processes, not of rank %d: it "
        "continues from rank 0's (the run is not exactly the uninterrupted one)",
        epoch,
        len(ranks),
        rank,
    )
    return ranks[0]


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a finished run ended: its last epoch (round), the ``num_epochs`` and ``max_steps``
    it was asked for, and the early-stopping reason (None: its duration was reached)."""

    epoch: int
    num_epochs: int
    stop_reason: str | None = None
    max_steps: int | None = None

    def write(self, directory: Path) -> None:
        """Record this end in ``directory`` (the checkpoint directory), atomically."""
        data = {
            "format": _END_FORMAT,
            "epoch": self.epoch,
            "num_epochs": self.num_epochs,
            "stop_reason": self.stop_reason,
            "max_steps": self.max_steps,
        }
        atomic_write(directory / RUN_END, (json.dumps(data, indent=2) + "\n").encode("utf-8"))

    def complete_for(self, num_epochs: int, max_steps: int | None = None) -> bool:
        """Whether a resume asking for ``num_epochs`` (and ``max_steps``) has nothing left to
        train: it asks for no more epochs and no more steps than this run was."""
        more_steps = max_steps is not None and (
            self.max_steps is None or max_steps > self.max_steps
        )
        return num_epochs <= self.num_epochs and not more_steps


def read_run_end(directory: Path, latest: int | None) -> RunEnd | None:
    """The recorded end of the run whose newest complete checkpoint is ``latest``, or None (no
    record, an unreadable one, or one of another epoch: the run went on after it)."""
    try:
        data = json.loads((directory / RUN_END).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no record, or a damaged one: not known to be finished
        return None
    if not isinstance(data, dict) or data.get("format") != _END_FORMAT:
        return None
    epoch, num_epochs, reason = data.get("epoch"), data.get("num_epochs"), data.get("stop_reason")
    max_steps = data.get("max_steps")  # absent in records of runs without max_steps
    if (
        not isinstance(epoch, int)
        or epoch != latest
        or not isinstance(num_epochs, int)
        or not isinstance(reason, str | None)
        or not isinstance(max_steps, int | None)
    ):
        return None
    return RunEnd(epoch, num_epochs, reason, max_steps)


def clear_run_end(directory: Path) -> None:
    """Forget a recorded end: this run trains, so the directory's run is not finished."""
    (directory / RUN_END).unlink(missing_ok=True)
