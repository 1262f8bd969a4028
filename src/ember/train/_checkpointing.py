"""The run's checkpoints: when they are due, taking them (at a round's end or inside a round),
restoring the run from one, and keeping the last round end after a stop.

The loop (``_loop.py``) says where it is; the saver turns that into the run's state
(``_state/``: a registry of named parts) and hands the records to the run's checkpointer.
``checkpoint_every`` is followed with :class:`~ember.train._schedule.RoundMarks`: steps and
passes are the same on every process; seconds are read on the main process's clock and
agreed. Every process takes part in a checkpoint (the RNG states are gathered, a sharded model's
ranks write their shards); the main process syncs the logs and writes the rest.
"""

from __future__ import annotations

import time
from typing import Any

from ember._rundir.end import clear_run_end
from ember.train._callbacks.called import stateful_callbacks
from ember.train._checkpoint.checkpointer import (
    MidRoundCheckpointer,
    RunCheckpointer,
    TrainingRecords,
)
from ember.train._checkpoint.mid_round import ResumePoint, point_directory
from ember.train._checkpoint.resume import restore_point
from ember.train._counters import RunCounters
from ember.train._hooks import Stateful
from ember.train._learner import Learner
from ember.train._logger.store import EventStore
from ember.train._plan import RunPlan
from ember.train._schedule import RoundMarks
from ember.train._state import (
    CountersPart,
    EarlyStoppingPart,
    LoadersPart,
    Resumed,
    RngPart,
    RoundPart,
    RunState,
    SchedulerPart,
    UserPart,
    WeightsPart,
)
from ember.train._strategy.base import StrategyRun

__all__ = ["CheckpointSaver"]


class CheckpointSaver:
    """The checkpoints of one run (see the module doc); without a checkpointer it takes none."""

    def __init__(
        self,
        plan: RunPlan,
        learner: Learner[Any],
        run: StrategyRun,
        counters: RunCounters,
        store: EventStore,
        scaler: Any,
    ) -> None:
        self.plan, self.counters, self.store, self.run = plan, counters, store, run
        self.checkpointer: RunCheckpointer | None = plan.checkpointer
        self.marks = RoundMarks(0, 0, 0.0)  # the last checkpoint's, for checkpoint_every
        self.last_saved: tuple[int, TrainingRecords] | None = None  # the last round end's
        self.state = _run_state(plan, learner, run, counters, store, scaler)

    def begin(self, start: ResumePoint | None) -> Resumed:
        """The run starts at ``start`` (None: afresh): the state restored from its checkpoint on
        every process, then, a run directory's recorded end forgotten (this run trains), and
        ``checkpoint_every`` counted from here. Returns where the loop goes on. A refused
        restore leaves the directory as it was."""
        resumed = Resumed(1) if start is None else self._restore(start)
        if self.plan.writes_files:
            checkpointer = self.checkpointer
            clear_run_end(
                self.plan.config.directory, None if checkpointer is None else checkpointer.directory
            )
        counters = self.counters
        self.marks = RoundMarks(counters.optimizer_steps, counters.passes, time.monotonic())
        return resumed

    def _restore(self, point: ResumePoint) -> Resumed:
        """The run's state put back from the checkpoint of ``point``: as choosing it read and
        verified it (``_checkpoint/resume.py``), or read by the checkpointer now."""
        checkpointer = self.checkpointer
        if checkpointer is None:
            raise ValueError(f"resuming from the checkpoint of {point} needs checkpointers")
        records = restore_point(checkpointer, point)
        where = f"{point} in {point_directory(checkpointer.directory, point)}"
        return self.state.restore(records, point, where)

    def round_end(self, round: int) -> bool:
        """Checkpoint the end of the round ``round`` if ``checkpoint_every`` says so (always the
        run's last round); the checkpointing strategy decides what is kept. True when a
        checkpoint was taken."""
        checkpointer = self.checkpointer
        if checkpointer is None:
            return False
        counters = self.counters
        due = self.marks.take(self.plan.schedule, counters.optimizer_steps, counters.passes)
        interval = self.plan.schedule.checkpoint
        if interval is not None and interval.unit == "seconds":
            due = self.run.decide(due)  # the processes' clocks differ: the main process's says
        if not due:
            return False
        records = self._snapshot(ResumePoint(round))
        if records is not None:
            self.last_saved = (round, checkpointer.checkpoint(round, records, self.store))
        return True

    def mid_round_due(self, step: int) -> bool:
        """After optimizer step ``step`` inside a round: whether ``checkpoint_every(steps=N |
        seconds=T)`` asks for a checkpoint here (the main process's clock decides seconds)."""
        interval = self.plan.schedule.checkpoint
        if interval is None or interval.unit == "epochs" or self.plan.mid_round_blocker:
            return False
        if interval.unit == "steps":
            return self.marks.due(interval, step, 0, 0.0)
        return self.run.decide(self.marks.due(interval, step, 0, time.monotonic()))

    def mid_round(self, round: int, *, trained: bool) -> None:
        """Checkpoint this optimizer step inside the round ``round``: every item is logged and the
        metrics thread flushed already; ``trained``: the round's training is over (a stop on
        its last step)."""
        checkpointer = self.checkpointer
        assert isinstance(checkpointer, MidRoundCheckpointer)  # else mid_round_blocker is set
        counters = self.counters
        step = counters.optimizer_steps
        records = self._snapshot(ResumePoint(round, step), trained=trained)
        if records is not None:
            checkpointer.checkpoint_mid_round(round, step, records)
        self.marks = RoundMarks(step, counters.passes, time.monotonic())

    def keep_last_round(self) -> None:
        """After a stop: make sure the last round end's checkpoint is on disk, even if the
        strategy had not kept it, so a resume (from it, or from a newer mid-round checkpoint)
        ends exactly as an uninterrupted run."""
        checkpointer = self.checkpointer
        if checkpointer is not None and self.last_saved is not None:
            checkpointer.save(*self.last_saved)

    def _snapshot(self, point: ResumePoint, *, trained: bool = False) -> TrainingRecords | None:
        """The records of ``point`` on the main process (None elsewhere); the logs up to here
        reach the disk before the checkpoint commits."""
        if self.plan.main:
            self.store.sync()
        return self.state.snapshot(point, trained=trained)


def _run_state(
    plan: RunPlan,
    learner: Learner[Any],
    run: StrategyRun,
    counters: RunCounters,
    store: EventStore,
    scaler: Any,
) -> RunState:
    """The parts of this run's checkpoints, in the order a snapshot writes them."""
    config = plan.config
    state = RunState(main=plan.main)
    state.register("loop", CountersPart(counters, learner, scaler))
    state.register("rng", RngPart(run.gather, run.rank))
    state.register("loaders", LoadersPart(run.loaders))
    if config.early_stopping is not None:
        state.register("early_stopping", EarlyStoppingPart(config.early_stopping))
    state.register("round", RoundPart(counters, plan.train_metrics, store, main=plan.main))
    if config.stateful:
        state.register("user", UserPart(dict(config.stateful)))
    callbacks = stateful_callbacks(config.callbacks)
    if callbacks:
        state.register("callbacks", UserPart(callbacks, key="callbacks"))
    module = config.data_module
    if isinstance(module, Stateful):  # a data module with state_dict()/load_state_dict()
        state.register("data_module", UserPart({type(module).__qualname__: module}, "data_module"))
    state.register("scheduler", SchedulerPart(learner))
    directory = plan.checkpointer.directory if plan.checkpointer is not None else None
    if directory is not None:
        state.register("weights", WeightsPart(learner, run, directory))
    return state
