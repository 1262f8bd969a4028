"""What a training checkpoint holds and how a run is put back from it (exact resume).

Besides the model, the optimizer and the scheduler, ember saves what an exact resume needs and
Burn does not keep: the RNG states of torch, numpy and Python (of every process of the run), every
loader's position and shuffle stream, the early-stopping state and (through the checkpointer)
the checkpointing strategy's state. A run resumed at a round end, or at the optimizer step of a
mid-round checkpoint, therefore ends with exactly the weights, optimizer state and metric logs
of a run that was never interrupted.

The state record's metadata::

    {"format": "ember.training-state", "epoch": e,
     "step": k,                                       (a mid-round checkpoint: steps taken)
     "loop": {"optimizer_steps": steps taken so far, "train_passes": passes completed,
              "pass_items": items of the pass under way consumed, "lr": the last step's lr,
              "grad_scaler": <its state> (16-mixed)},
     "round": {"iteration": train items logged in the round,      (a mid-round checkpoint)
               "round_passes": passes completed in the round,
               "trained": whether the round's training is over,
               "metrics": {name: <each train metric's state_dict()>},   (tensors in the record)
               "logs": [{"logger": kind, "position": <its log_position()>}, ...]},
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
from ember.train._checkpoint.mid_round import ResumePoint, point_directory
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
from ember.train._checkpoint.run import MidRoundCheckpointer, RunCheckpointer, TrainingRecords
from ember.train._checkpoint.sharded import ShardedRecords, has_shards, is_sharded, load_shards
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._hooks import Stateful
from ember.train._learner import Learner

__all__ = [
    "RUN_END",
    "RestoredRun",
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
    point: ResumePoint,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
    rng_states: Sequence[dict[str, Any]],
    early_stopping: EarlyStoppingStrategy | None,
    loop: dict[str, Any],
    user: Mapping[str, Stateful],
    shards: ShardedRecords | None = None,
    round_state: Mapping[str, Any] | None = None,
) -> TrainingRecords:
    """The records of the run at ``point``; ``rng_states`` are every process's, in rank order.
    ``shards``: a sharded model's index records and files, already written by every rank;
    ``round_state``: a mid-round checkpoint's partial round (metric states may hold tensors)."""
    state: dict[str, Any] = {
        "format": _FORMAT,
        "epoch": point.epoch,
        "loop": loop,
        "rng": rng_states[0],
        "loaders": {name: loader.state_dict() for name, loader in loaders.items()},
    }
    if point.step is not None:
        state["step"] = point.step
    if len(rng_states) > 1:
        state["ranks_rng"] = list(rng_states)
    if early_stopping is not None:
        state["early_stopping"] = early_stopping.state_dict()
    record = state_record(state)
    tensors: dict[str, torch.Tensor] = {}
    metadata = dict(record.metadata)
    if round_state is not None:
        metadata["round"] = encode(dict(round_state), "round", tensors)
    if user:
        states = {name: stateful.state_dict() for name, stateful in user.items()}
        metadata["user"] = encode(states, "user", tensors)
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


@dataclass(frozen=True, slots=True)
class RestoredRun:
    """What a restored checkpoint holds for the loop itself: its ``loop`` counters (``{}`` in a
    checkpoint written before ember kept them) and, from a mid-round checkpoint, the partial
    round (``round``, tensors decoded)."""

    loop: dict[str, Any]
    round: dict[str, Any] | None = None


def restore_run(
    checkpointer: RunCheckpointer,
    point: ResumePoint,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
    early_stopping: EarlyStoppingStrategy | None,
    rank: int = 0,
    user: Mapping[str, Stateful] | None = None,
) -> RestoredRun:
    """Put the run back as it was at ``point`` (verified; never runs code).

    ``rank`` picks this process's RNG state from a checkpoint of several processes; a
    checkpoint of fewer processes continues from rank 0's (a warning says the run then differs
    from an uninterrupted one).
    """
    epoch, directory = point.epoch, point_directory(checkpointer.directory, point)
    where = f"{point} in {directory}"
    if point.step is None:
        records = checkpointer.restore(epoch)
    elif isinstance(checkpointer, MidRoundCheckpointer):
        records = checkpointer.restore_mid_round(epoch, point.step)
    else:
        raise CheckpointError(
            f"{checkpointer!r} cannot restore the checkpoint of {where}: it has no mid-round "
            "checkpoints"
        )
    state = records.state.metadata
    if (
        state.get("format") != _FORMAT
        or state.get("epoch") != epoch
        or state.get("step") != point.step
    ):
        raise CheckpointError(
            f"the state file of {where} is not an ember training state for that point (format "
            f"{state.get('format')!r}, epoch {state.get('epoch')!r}, step {state.get('step')!r})"
        )
    if is_sharded(records.model):  # any world size, into a sharded model or a plain one
        load_shards(directory, epoch, learner, records.model, records.optim)
    elif has_shards(learner.model):
        raise CheckpointError(
            f"the checkpoint of {where} is not sharded: a FullyShardedDataParallel run resumes "
            "from a sharded checkpoint (load the weights into the plain model before the run "
            "instead)"
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
            raise CheckpointError(f"the checkpoint of {where} has no {name} loader")
        try:
            loader.load_state_dict(saved_loaders[name])
        except ValueError as error:
            raise CheckpointError(
                f"the checkpoint of {where} holds a {name} loader state this run cannot load: "
                f"{error}"
            ) from error
    if early_stopping is not None and "early_stopping" in state:
        early_stopping.load_state_dict(state["early_stopping"])
    if user:
        saved = decode(state.get("user", {}), records.state.tensors, "the checkpoint's user state")
        for name, stateful in user.items():
            if name not in saved:
                raise CheckpointError(
                    f"the checkpoint of {where} holds no state named {name!r} (it has "
                    f"{sorted(saved)})"
                )
            stateful.load_state_dict(saved[name])
    try:
        set_rng_state(_rng_of(state, rank, point))
    except CheckpointError as error:
        raise CheckpointError(f"the state file of {where} holds a {error}") from None
    loop = state.get("loop", {})
    if not isinstance(loop, dict):
        raise CheckpointError(
            f"the state file of {where} holds a loop state that is not a mapping: {loop!r}"
        )
    partial = None
    if point.step is not None:
        partial = decode(state.get("round"), records.state.tensors, f"the round state of {where}")
        if not isinstance(partial, dict):
            raise CheckpointError(f"the state file of {where} holds no round state: {partial!r}")
    return RestoredRun(loop, partial)


def loop_count(loop: Mapping[str, Any], key: str, default: int, where: str) -> int:
    """The count ``key`` of a loop state (``default`` in a checkpoint older than it); a
    CheckpointError naming ``where`` and the value if it is not a count."""
    value = loop.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CheckpointError(f"{where} holds {key}={value!r}, not a count")
    return value


def _rng_of(state: Mapping[str, Any], rank: int, point: ResumePoint) -> Any:
    ranks = state.get("ranks_rng") or [state["rng"]]
    if rank < len(ranks):
        return ranks[rank]
    log.warning(
        "the checkpoint of %s holds the RNG states of %d processes, not of rank %d: it "
        "continues from rank 0's (the run is not exactly the uninterrupted one)",
        point,
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
