"""What a training checkpoint holds: the run's state as a registry of named parts (exact resume).

Besides the model, the optimizer and the scheduler, ember saves what an exact resume needs and
Burn does not keep: the loop's counters, the RNG states of torch, numpy and Python (of every
process of the run), every loader's position and shuffle stream, the early-stopping state, the
user's own state and, inside a round, the round's metrics and log positions; the checkpointing
strategy's state is added by the checkpointer. A run resumed at a round end, or at the optimizer
step of a mid-round checkpoint, therefore ends with exactly the weights, optimizer state and
metric logs of a run that was never interrupted.

Each part writes its entry and reads it back with its own checks; :class:`RunState` runs them:
a snapshot is a loop over the parts, a restore the same loop backwards. Adding state to
checkpoints is one part and one :meth:`RunState.register`. The keys on disk::

    model-{e}, optim-{e}, scheduler-{e}.safetensors       "weights", "scheduler"
                                                          (a sharded run: its shard files)
    state-{e}.safetensors, its JSON metadata:
    {"format": "ember.training-state", "epoch": e,
     "step": k,                                           (a mid-round checkpoint: steps taken)
     "loop": {"optimizer_steps": steps taken so far, "train_passes": passes completed,
              "pass_items": items of the pass under way consumed, "lr": the last step's lr,
              "grad_scaler": <its state> (16-mixed)},                          "loop"
     "rng": <rank 0's RNG state>, "ranks_rng": [<rank 0's>, <rank 1's>, ...], "rng"
     "loaders": {"train": <state>, "valid": <state>, ...},                    "loaders"
     "early_stopping": <its state_dict()>,                                    "early_stopping"
     "round": {"iteration": train items logged in the round,                  "round"
               "round_passes": passes completed in the round,     (a mid-round checkpoint)
               "trained": whether the round's training is over,
               "metrics": {name: <each train metric's state_dict()>},   (tensors in the record)
               "logs": [{"logger": kind, "position": <its log_position()>}, ...]},
     "user": {name: <state_dict() of with_stateful(name, ...)>},               "user"
     "callbacks": {name: <a callback's state_dict()>},                        "callbacks"
     "data_module": {class name: <the data module's state_dict()>}}           "data_module"

A part marked ``everywhere`` takes part in every process's snapshot (gathering the ranks' RNG
states, writing a sharded model's shards); the others run on the main process, which alone
writes the records.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from ember._errors import CheckpointError
from ember._protocols import member
from ember._rundir.atomic import CheckpointFile
from ember.data import DataLoader
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.mid_round import ResumePoint, VerifiedPoint, point_directory
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
from ember.train._checkpoint.rng import rng_state, set_rng_state
from ember.train._checkpoint.sharded import ShardingRun, has_shards, is_sharded, load_shards
from ember.train._counters import RunCounters
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._hooks import Stateful
from ember.train._learner import Learner
from ember.train._logger.store import EventStore
from ember.train._metric.base import Metric
from ember.train._metric.resumable import has_metric_state
from ember.train._vocabulary import Split

__all__ = [
    "CountersPart",
    "EarlyStoppingPart",
    "LoadersPart",
    "Resumed",
    "RngPart",
    "RoundPart",
    "RunState",
    "SchedulerPart",
    "Snapshot",
    "StatePart",
    "UserPart",
    "WeightsPart",
]

_FORMAT = "ember.training-state"
log = logging.getLogger("ember.train")


@dataclass(slots=True)
class Snapshot:
    """One checkpoint while it is built or read: its point, the weights and scheduler records,
    and the state file's JSON (``state``) and tensors; ``where`` names it in errors."""

    point: ResumePoint
    state: dict[str, Any]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    model: Record | None = None
    optim: Record | None = None
    scheduler: Record | None = None
    shards: tuple[CheckpointFile, ...] = ()
    where: str = ""
    trained: bool = False
    """A mid-round checkpoint's round has no training left (a stop at its last step): saved,
    or read back."""

    def count(self, entry: Mapping[str, Any], key: str, default: int) -> int:
        """The count ``key`` of a state ``entry`` (``default`` in a checkpoint older than it);
        a CheckpointError naming the checkpoint and the value if it is not a count."""
        value = entry.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(
                f"the checkpoint of {self.where} holds {key}={value!r}, not a count"
            )
        return value


class StatePart(Protocol):
    """One named part of a run's checkpoint: it writes its entry and reads it back."""

    @property
    def everywhere(self) -> bool:
        """Whether every process saves it (a collective), not only the main one."""
        ...

    def save(self, snapshot: Snapshot) -> None:
        """Write this part into ``snapshot``."""
        ...

    def load(self, snapshot: Snapshot) -> None:
        """Put this part back from ``snapshot`` (CheckpointError naming what does not fit)."""
        ...


class RunState:
    """The run's checkpointed state: its named parts, saved in order and restored backwards."""

    def __init__(self, *, main: bool) -> None:
        self.main = main
        self._parts: dict[str, StatePart] = {}

    def register(self, name: str, part: StatePart) -> None:
        """Checkpoint ``part`` under ``name`` (names are unique)."""
        if name in self._parts:
            raise ValueError(f"a state part named {name!r} is registered already")
        self._parts[name] = part

    def snapshot(self, point: ResumePoint, *, trained: bool = False) -> TrainingRecords | None:
        """The records of the run at ``point`` (``trained``: a mid-round point whose round has
        no training left) on the main process; None elsewhere (where only the parts that are
        collectives ran)."""
        state: dict[str, Any] = {"format": _FORMAT, "epoch": point.epoch}
        if point.step is not None:
            state["step"] = point.step
        snapshot = Snapshot(point, state, trained=trained)
        for part in self._parts.values():
            if self.main or part.everywhere:
                part.save(snapshot)
        if not self.main:
            return None
        assert snapshot.model is not None and snapshot.optim is not None
        assert snapshot.scheduler is not None
        # the parts wrote JSON (tensors encoded into snapshot.tensors): copied, and checked
        metadata = state_record(snapshot.state).metadata
        return TrainingRecords(
            snapshot.model,
            snapshot.optim,
            snapshot.scheduler,
            Record(tensors=snapshot.tensors, metadata=metadata),
            snapshot.shards,
        )

    def restore(self, records: TrainingRecords, point: ResumePoint, where: str) -> Resumed:
        """Put every part back from ``records``, the checkpoint of ``point`` (verified by the
        checkpointer; nothing is loaded with pickle), in the reverse order of a snapshot; where
        the loop goes on from is returned."""
        state = records.state.metadata
        if (
            state.get("format") != _FORMAT
            or state.get("epoch") != point.epoch
            or state.get("step") != point.step
        ):
            raise CheckpointError(
                f"the state file of {where} is not an ember training state for that point "
                f"(format {state.get('format')!r}, epoch {state.get('epoch')!r}, step "
                f"{state.get('step')!r})"
            )
        snapshot = Snapshot(
            point,
            dict(state),
            dict(records.state.tensors),
            records.model,
            records.optim,
            records.scheduler,
            records.shards,
            where,
        )
        for part in reversed(list(self._parts.values())):
            part.load(snapshot)
        return Resumed(point.starting_epoch, point.step is not None, snapshot.trained)


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where a restored run goes on: ``round``, from a mid-round checkpoint (``mid_round``:
    the round's counters are the checkpoint's) whose training may be over already
    (``trained``: a stop at the round's last step; the round goes straight to validation)."""

    round: int
    mid_round: bool = False
    trained: bool = False


class CountersPart:
    """``loop``: the counters, the last step's lr and the gradient scaler."""

    everywhere = False

    def __init__(
        self,
        counters: RunCounters,
        learner: Learner[Any],
        scaler: torch.amp.GradScaler | None,
    ) -> None:
        self.counters, self.learner, self.scaler = counters, learner, scaler

    def save(self, snapshot: Snapshot) -> None:
        counters = self.counters
        loop: dict[str, Any] = {
            "optimizer_steps": counters.optimizer_steps,
            "train_passes": counters.passes,
            "pass_items": counters.pass_items,
            "lr": self.learner.lr_current,
        }
        if self.scaler is not None:
            loop["grad_scaler"] = self.scaler.state_dict()
        snapshot.state["loop"] = loop

    def load(self, snapshot: Snapshot) -> None:
        """Older checkpoints without a count resume at a round boundary."""
        loop = snapshot.state.get("loop", {})
        if not isinstance(loop, dict):
            raise CheckpointError(
                f"the state file of {snapshot.where} holds a loop state that is not a mapping: "
                f"{loop!r}"
            )
        counters = self.counters
        counters.optimizer_steps = snapshot.count(loop, "optimizer_steps", 0)
        counters.passes = snapshot.count(loop, "train_passes", snapshot.point.epoch)
        counters.pass_items = snapshot.count(loop, "pass_items", 0)
        lr = loop.get("lr")
        if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float)):
            raise CheckpointError(
                f"the checkpoint of {snapshot.where} holds lr={lr!r}, not a number"
            )
        self.learner.lr_current = None if lr is None else float(lr)
        scaler_state = loop.get("grad_scaler")
        if self.scaler is not None and isinstance(scaler_state, dict):
            self.scaler.load_state_dict(scaler_state)


class RngPart:
    """``rng``: every process's RNG states (gathered on the main process, in rank order)."""

    everywhere = True

    def __init__(self, gather: Callable[[Any], list[Any] | None], rank: int) -> None:
        self.gather, self.rank = gather, rank

    def save(self, snapshot: Snapshot) -> None:
        states = self.gather(rng_state())
        if states is None:  # not the main process: its state went to it
            return
        snapshot.state["rng"] = states[0]
        if len(states) > 1:
            snapshot.state["ranks_rng"] = list(states)

    def load(self, snapshot: Snapshot) -> None:
        """This rank's state; a checkpoint of fewer processes continues from rank 0's (a
        warning says the run then differs from an uninterrupted one)."""
        state = snapshot.state
        ranks = state.get("ranks_rng") or [state.get("rng")]
        if self.rank >= len(ranks):
            log.warning(
                "the checkpoint of %s holds the RNG states of %d processes, not of rank %d: it "
                "continues from rank 0's (the run is not exactly the uninterrupted one)",
                snapshot.point,
                len(ranks),
                self.rank,
            )
        try:
            set_rng_state(ranks[self.rank] if self.rank < len(ranks) else ranks[0])
        except CheckpointError as error:
            raise CheckpointError(f"the state file of {snapshot.where} holds a {error}") from None


class LoadersPart:
    """``loaders``: each placed loader's position and shuffle stream, by its key."""

    everywhere = False

    def __init__(self, loaders: Mapping[str, DataLoader[Any]]) -> None:
        self.loaders = loaders

    def save(self, snapshot: Snapshot) -> None:
        snapshot.state["loaders"] = {
            name: loader.state_dict() for name, loader in self.loaders.items()
        }

    def load(self, snapshot: Snapshot) -> None:
        saved = snapshot.state.get("loaders", {})
        for name, loader in self.loaders.items():
            if name not in saved:
                raise CheckpointError(f"the checkpoint of {snapshot.where} has no {name} loader")
            try:
                loader.load_state_dict(saved[name])
            except ValueError as error:
                raise CheckpointError(
                    f"the checkpoint of {snapshot.where} holds a {name} loader state this run "
                    f"cannot load: {error}"
                ) from error


class EarlyStoppingPart:
    """``early_stopping``: the strategy's state (its best epoch and value)."""

    everywhere = False

    def __init__(self, strategy: EarlyStoppingStrategy) -> None:
        self.strategy = strategy

    def save(self, snapshot: Snapshot) -> None:
        state_dict = member(self.strategy, EarlyStoppingStrategy, "state_dict")
        snapshot.state["early_stopping"] = state_dict()

    def load(self, snapshot: Snapshot) -> None:
        """A checkpoint written without early stopping leaves the strategy as it is."""
        if "early_stopping" in snapshot.state:
            load = member(self.strategy, EarlyStoppingStrategy, "load_state_dict")
            load(snapshot.state["early_stopping"])


class UserPart:
    """``user``: the state of every ``with_stateful(name, state)``, tensors in the record;
    ``callbacks``: that of every callback with ``state_dict``/``load_state_dict``, by the name
    :func:`~ember.train._callbacks.called.state_names` gives it."""

    everywhere = False

    def __init__(self, stateful: Mapping[str, Stateful], key: str = "user") -> None:
        self.stateful, self.key = stateful, key

    def save(self, snapshot: Snapshot) -> None:
        states = {name: state.state_dict() for name, state in self.stateful.items()}
        snapshot.state[self.key] = encode(states, self.key, snapshot.tensors)

    def load(self, snapshot: Snapshot) -> None:
        key = self.key
        saved = decode(
            snapshot.state.get(key, {}), snapshot.tensors, f"the checkpoint's {key} state"
        )
        for name, stateful in self.stateful.items():
            if name not in saved:
                kind = "callback" if key == "callbacks" else "state"
                raise CheckpointError(
                    f"the checkpoint of {snapshot.where} holds no {kind} state named {name!r} "
                    f"(it has {sorted(saved)}): it was written by a run without it; resume "
                    f"with the {kind}s it was written with, or start afresh"
                )
            stateful.load_state_dict(saved[name])


class RoundPart:
    """``round``, in a mid-round checkpoint: the round's counters on every process, and on the
    main process each train metric's running state and where each metric log ends (a resumed
    run goes on with the same iteration numbers, metric values and log lines)."""

    everywhere = False

    def __init__(
        self,
        counters: RunCounters,
        metrics: Sequence[Metric],
        store: EventStore,
        *,
        main: bool,
    ) -> None:
        self.counters, self.metrics, self.store, self.main = counters, metrics, store, main

    def save(self, snapshot: Snapshot) -> None:
        if snapshot.point.step is None:  # a round end: nothing of a round under way
            return
        counters = self.counters
        partial = {
            "iteration": counters.round_items,
            "round_passes": counters.round_passes,
            "trained": snapshot.trained,
            "metrics": {metric.name: metric.state_dict() for metric in self.metrics},  # type: ignore[attr-defined]
            "logs": self.store.log_positions(Split.TRAIN, snapshot.point.epoch),
        }
        snapshot.state["round"] = encode(partial, "round", snapshot.tensors)

    def load(self, snapshot: Snapshot) -> None:
        if snapshot.point.step is None:
            return
        where = f"the checkpoint of {snapshot.where}"
        partial = decode(
            snapshot.state.get("round"), snapshot.tensors, f"the round state of {where}"
        )
        if not isinstance(partial, dict):
            raise CheckpointError(
                f"the state file of {snapshot.where} holds no round state: {partial!r}"
            )
        counters = self.counters
        counters.round_items = snapshot.count(partial, "iteration", 0)
        counters.round_passes = snapshot.count(partial, "round_passes", 0)
        snapshot.trained = partial.get("trained") is True
        if self.main:
            self._load_metrics_and_logs(partial, snapshot.point.epoch, where)

    def _load_metrics_and_logs(self, partial: dict[str, Any], epoch: int, where: str) -> None:
        """Each train metric's running state, and the train logs of ``epoch`` cut back to where
        the checkpoint left them."""
        saved = partial.get("metrics")
        if not isinstance(saved, Mapping):
            raise CheckpointError(f"{where} holds no metric states: {saved!r}")
        for metric in self.metrics:
            if metric.name not in saved or not has_metric_state(metric):
                raise CheckpointError(
                    f"{where} holds no running state of the train metric {metric.name!r} (it "
                    f"has {sorted(saved)}): the metrics changed since it was written; resume "
                    "from a round end with checkpoint(epoch), or register the same train metrics"
                )
            try:
                metric.load_state_dict(saved[metric.name])  # type: ignore[attr-defined]
            except (ValueError, TypeError) as error:
                raise CheckpointError(f"{where}: {error}") from error
        logs = partial.get("logs", [])
        try:
            self.store.resume_split(Split.TRAIN, epoch, logs if isinstance(logs, list) else [])
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{where}: {error}") from error


class SchedulerPart:
    """``scheduler``: the learning-rate scheduler's state, in a record of its own."""

    everywhere = False

    def __init__(self, learner: Learner[Any]) -> None:
        self.learner = learner

    def save(self, snapshot: Snapshot) -> None:
        scheduler = self.learner.lr_scheduler
        snapshot.scheduler = state_record({} if scheduler is None else scheduler.state_dict())

    def load(self, snapshot: Snapshot) -> None:
        scheduler = self.learner.lr_scheduler
        if scheduler is not None and snapshot.scheduler is not None:
            scheduler.load_state_dict(dict(snapshot.scheduler.metadata))


class WeightsPart:
    """``model`` and ``optim``: the weights and the optimizers' state; a sharded run's every
    rank writes its shards (an index in the records) and any world size reads them back."""

    def __init__(self, learner: Learner[Any], run: object, directory: Path) -> None:
        self.learner, self.run, self.directory = learner, run, directory

    @property
    def everywhere(self) -> bool:
        """A sharded model's ranks each write their shards."""
        return isinstance(self.run, ShardingRun)

    def save(self, snapshot: Snapshot) -> None:
        learner, point = self.learner, snapshot.point
        if isinstance(self.run, ShardingRun):
            shards = self.run.write_shards(
                point_directory(self.directory, point), point.epoch, learner
            )
            if shards is not None:
                snapshot.model, snapshot.optim, snapshot.shards = (
                    shards.model,
                    shards.optim,
                    shards.files,
                )
            return
        snapshot.model = model_record(learner.model)
        snapshot.optim = (
            optimizers_record(learner.optimizers)
            if learner.several_optimizers
            else optimizer_record(learner.optimizer)
        )

    def load(self, snapshot: Snapshot) -> None:
        learner, point = self.learner, snapshot.point
        model, optim = snapshot.model, snapshot.optim
        assert model is not None and optim is not None  # the checkpointer read every file
        if is_sharded(model):  # any world size, into a sharded model or a plain one
            verified = point.manifest if isinstance(point, VerifiedPoint) else None
            directory = point_directory(self.directory, point)
            load_shards(directory, point.epoch, learner, model, optim, verified)
        elif has_shards(learner.model):
            raise CheckpointError(
                f"the checkpoint of {snapshot.where} is not sharded: a FullyShardedDataParallel "
                "run resumes from a sharded checkpoint (load the weights into the plain model "
                "before the run instead)"
            )
        else:
            load_model_record(learner.model, model)
            if learner.several_optimizers:
                load_optimizers_record(learner.optimizers, optim)
            else:
                load_optimizer_record(learner.optimizer, optim)
