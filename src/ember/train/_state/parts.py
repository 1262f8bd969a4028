"""The parts of a run's checkpoint, each its entry written and read back with its own checks:
the loop's counters (``loop``), every process's RNG states (``rng``), the loaders' positions
(``loaders``), early stopping (``early_stopping``), the user's and the callbacks' state
(``user``, ``callbacks``, ``data_module``), a round under way (``round``: its counters, train
metrics and log positions), the scheduler and the weights (``registry.py`` runs them; the keys
on disk: the package's docstring).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ember._errors import CheckpointError
from ember._protocols import member
from ember.data import DataLoader
from ember.train._checkpoint.mid_round import VerifiedPoint, point_directory
from ember.train._checkpoint.record import (
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
from ember.train._state.registry import Snapshot
from ember.train._vocabulary import Split

__all__ = [
    "CountersPart",
    "EarlyStoppingPart",
    "LoadersPart",
    "RngPart",
    "RoundPart",
    "SchedulerPart",
    "UserPart",
    "WeightsPart",
]

log = logging.getLogger("ember.train")


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
