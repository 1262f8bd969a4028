"""The training loop's checkpoints: when they are due, taking them (at a round's end or inside
a round), restoring a run from one, and keeping the last round end after a stop.

The loop (``_loop.py``) says where it is; this module turns that into records for the run's
checkpointer (``_checkpoint/``): every process's RNG state is gathered, a sharded model's ranks
write their shards, and the main process syncs the logs and writes the rest. ``checkpoint_every``
is followed with :class:`~ember.train._schedule.RoundMarks`: steps and passes are the same on
every process; seconds are read on the main process's clock and agreed.
"""

from __future__ import annotations

import time
from typing import Any

from ember.train._checkpoint.mid_round import ResumePoint, point_directory
from ember.train._checkpoint.rng import rng_state
from ember.train._checkpoint.run import MidRoundCheckpointer, RunCheckpointer, TrainingRecords
from ember.train._checkpoint.run_state import restore_run, snapshot_run
from ember.train._checkpoint.sharded import ShardingRun
from ember.train._learner import Learner
from ember.train._loop_plan import LoopPlan
from ember.train._loop_state import LoopCounters, restore_counters, restore_round_logs_and_metrics
from ember.train._metric.store import EventStore
from ember.train._schedule import RoundMarks, Schedule
from ember.train._strategy.base import StrategyRun
from ember.train._vocabulary import Split
from ember.train._window import OptimizerWindow

__all__ = ["LoopCheckpoints"]


class LoopCheckpoints:
    """The checkpoints of one loop (see the module doc); ``main``: this process writes."""

    def __init__(
        self,
        plan: LoopPlan,
        schedule: Schedule,
        learner: Learner[Any],
        run: StrategyRun,
        window: OptimizerWindow,
        count: LoopCounters,
        store: EventStore,
        *,
        main: bool,
    ) -> None:
        self.plan, self.schedule, self.learner, self.run = plan, schedule, learner, run
        self.window, self.count, self.store, self.main = window, count, store, main
        self.marks = RoundMarks(0, 0, 0.0)  # the last checkpoint's, for checkpoint_every
        self.last_saved: tuple[int, TrainingRecords] | None = None  # the last round end's

    def restore(self, point: ResumePoint) -> None:
        """Put the run back as it was at ``point``, on every process (the main process also
        restores the train metrics and cuts the train logs back, for a mid-round point)."""
        checkpointer = self.plan.checkpointer
        if checkpointer is None:
            raise ValueError(f"resuming from the checkpoint of {point} needs checkpointers")
        run, plan = self.run, self.plan
        loaders, stopping, stateful = run.loaders, plan.early_stopping, plan.stateful
        restored = restore_run(
            checkpointer, point, self.learner, loaders, stopping, run.rank, stateful
        )
        where = f"the checkpoint of {point} in {point_directory(checkpointer.directory, point)}"
        restore_counters(restored, self.count, self.window, self.learner, where, point.epoch)
        if self.main:
            restore_round_logs_and_metrics(
                restored, plan.train_metrics, self.store, point.epoch, where
            )

    def start(self) -> None:
        """The run starts (or resumes) here: ``checkpoint_every`` counts from now."""
        self.marks = RoundMarks(self.window.optimizer_steps, self.count.passes, time.monotonic())

    def round_end(self, epoch: int, *, pass_open: bool) -> None:
        """Checkpoint the end of round ``epoch`` if ``checkpoint_every`` says so (always the
        run's last round); the checkpointing strategy decides what is kept."""
        checkpointer = self.plan.checkpointer
        if checkpointer is None:
            return
        due = self.marks.take(self.schedule, self.window.optimizer_steps, self.count.passes)
        interval = self.schedule.checkpoint
        if interval is not None and interval.unit == "seconds":
            due = self.run.decide(due)  # the processes' clocks differ: the main process's says
        if not due:
            return
        records = self._snapshot(checkpointer, ResumePoint(epoch), pass_open)
        if records is not None:
            self.last_saved = (epoch, checkpointer.checkpoint(epoch, records, self.store))

    def mid_round_due(self, step: int) -> bool:
        """After optimizer step ``step`` inside a round: whether ``checkpoint_every(steps=N |
        seconds=T)`` asks for a checkpoint here (the main process's clock decides seconds)."""
        interval = self.schedule.checkpoint
        if interval is None or interval.unit == "epochs" or self.plan.mid_round_blocker:
            return False
        if interval.unit == "steps":
            return self.marks.due(interval, step, 0, 0.0)
        return self.run.decide(self.marks.due(interval, step, 0, time.monotonic()))

    def mid_round(self, epoch: int, *, trained: bool, pass_open: bool) -> None:
        """Checkpoint this optimizer step inside round ``epoch``: every item is logged and the
        metrics thread flushed already; ``trained``: the round's training is over (a stop on
        its last step)."""
        checkpointer = self.plan.checkpointer
        assert isinstance(checkpointer, MidRoundCheckpointer)  # else mid_round_blocker is set
        step, count = self.window.optimizer_steps, self.count
        round_state = None
        if self.main:
            logs = self.store.log_positions(Split.TRAIN, epoch)
            round_state = count.round_state(trained, self.plan.train_metrics, logs)
        point = ResumePoint(epoch, step)
        records = self._snapshot(checkpointer, point, pass_open, round_state)
        if records is not None:
            checkpointer.checkpoint_mid_round(epoch, step, records)
        self.marks = RoundMarks(step, count.passes, time.monotonic())

    def keep_last_round(self) -> None:
        """After a stop: make sure the last round end's checkpoint is on disk, even if the
        strategy had not kept it, so a resume (from it, or from a newer mid-round checkpoint)
        ends exactly as an uninterrupted run."""
        checkpointer = self.plan.checkpointer
        if checkpointer is not None and self.last_saved is not None:
            checkpointer.save(*self.last_saved)

    def _snapshot(
        self,
        checkpointer: RunCheckpointer,
        point: ResumePoint,
        pass_open: bool,
        round_state: dict[str, Any] | None = None,
    ) -> TrainingRecords | None:
        """The records of ``point`` on the main process (None elsewhere): every process's RNG
        state gathered, a sharded model's shards written by every rank, the logs synced."""
        run, plan = self.run, self.plan
        states = run.gather(rng_state())
        shards = (
            run.write_shards(
                point_directory(checkpointer.directory, point), point.epoch, self.learner
            )
            if isinstance(run, ShardingRun)
            else None
        )
        if not self.main or states is None:
            return None
        self.store.sync()  # the logs up to here reach the disk before the checkpoint commits
        loop = self.count.loop_state(self.window, self.learner, pass_open)
        return snapshot_run(
            point,
            self.learner,
            run.loaders,
            states,
            plan.early_stopping,
            loop,
            plan.stateful,
            shards,
            round_state,
        )
