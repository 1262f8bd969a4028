"""The training loop: rounds, the train and valid passes, checkpoints, early stopping, stops.

Every strategy runs this loop; a strategy only places the model and says how a unit of work
runs and how gradients combine (``train/_strategy/base.py``). ``launch`` (``_launch.py``) sets
up the run directory, the logs, the renderer and ``train-worker`` around it. The loop::

    run = strategy.start(learner, train, valid)        # model and loaders on their devices
    run.check_same(facts)                               # every process runs the same training
    if resuming after epoch r:                          # every process restores
        restore model, optimizer, scheduler, loaders, RNG states, early stopping and the
        checkpointing strategy from the checkpoint of epoch r
    Start(rounds, r + 1)            # a round ("epoch" below): an epoch, or N steps or N
    for epoch = r + 1, ... until the schedule ends:     # epochs (_schedule.py); hooks: _hooks.py
        StartSplit(epoch, train items, None in a step run) ; every replica in train mode
        for unit, progress in the train pass under way, or a new one (run.train_pass()):
            with the window's step context (epoch, iteration, optimizer steps, the unit;
                                            autocast and loss scaling under mixed precision):
                outputs = run.train_step(learner, unit)    # forward + backward; gradients in
                                                           # the main model's .grad slots
            if the window closes (n units, or the pass is complete):   (_window.py)
                lr_step; unscale; clip; optimizer_step (the model's optimize), or skip it on
                non-finite 16-mixed gradients; run.after_optimizer_step()
            items, stopper = run.report(outputs' items, interrupter.should_stop())
            ProcessedItem per item (iteration counts items; lr = the last step's lr); a run
                may return earlier units' items later (DDP's chunks): each gets its unit's stamp
            if stopper is not None: the partial window is dropped; stop after EndSplit
            the round ends here (N steps, N passes, max_steps or num_epochs reached): the pass
                goes on in the next round; else at the pass's end: the next pass
        EndSplit(epoch)
        if stopped: go to "stop"
        StartSplit(epoch, valid items) ; main model in eval mode, under inference_mode
                                                        # (skipped when training only)
        for batch, progress in run.valid_pass():
            ProcessedItem(run.inference_step(batch)) ; stop after this batch if asked
        EndSplit(epoch) ; EndEpoch(epoch)
        if checkpointer, early stopping or a metric-driven scheduler:
            flush train-worker (the epoch's values are in the logs now)
            if the metrics thread failed (the main process says): end here, write nothing
        a per-epoch scheduler advances (ReduceLROnPlateau with its monitored valid value)
            checkpoint(epoch) as checkpoint_every says (always the last round): the logs
                synced, every process's RNG state gathered, the main process writes (its
                checkpointing strategy decides what is kept; a sharded model: every rank
                writes its shards first)
            early stopping: the main process asks it; every process stops with its reason
        if stopped during validation: go to "stop"       # the epoch itself is complete
        asked to stop between two epochs: go to "stop"
    stop: the last complete epoch's checkpoint is written if the strategy had not kept it, so
          a resume reruns the abandoned epoch from its start; flush; log the reason
    return the last complete epoch and the stop reason (None: num_epochs reached)

An exception anywhere (a step, a loader, a checkpoint write) leaves the loop as it is; ``launch``
then finishes the run (``_launch.py``). The loop never reads a tensor back to the host: the
metrics thread does.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ember.data import Progress
from ember.train._checkpoint.learning import RunCheckpointer, TrainingRecords
from ember.train._checkpoint.rng import rng_state
from ember.train._checkpoint.run_state import loop_count, restore_run, snapshot_run
from ember.train._checkpoint.sharded import ShardingRun
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._events import EndEpoch, EndSplit, ProcessedItem, Start, StartSplit, TrainingItem
from ember.train._gradient_checkpointing import checkpointed
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._loop_plan import LoopPlan, LoopResult, same_training_facts
from ember.train._metric.store import EventStore
from ember.train._precision import autocast_of, grad_scaler
from ember.train._processor import EventProcessor
from ember.train._schedule import RoundMarks, Schedule, steps_per_pass
from ember.train._step import step_context
from ember.train._strategy.base import StrategyRun, model_device
from ember.train._vocabulary import Split
from ember.train._window import OptimizerWindow

__all__ = ["TrainingLoop"]

log = logging.getLogger("ember.train")


class TrainingLoop:
    """Runs :class:`LoopPlan` with ``learner`` on a strategy's ``run`` (see the module doc).

    ``main`` is the strategy's ``is_main``: only the main process writes checkpoints and asks
    early stopping, whose logs only it has.
    """

    def __init__(
        self,
        plan: LoopPlan,
        learner: Learner[Any],
        run: StrategyRun,
        *,
        main: bool,
        processor: EventProcessor,
        store: EventStore,
        interrupter: Interrupter,
    ) -> None:
        self.plan = plan
        self.learner = learner
        self.run = run
        self.main = main
        self.processor = processor
        self.store = store
        self.interrupter = interrupter
        device = model_device(learner)
        self.window = OptimizerWindow(
            plan.grads_accumulation,
            mean=plan.mean_accumulation,
            clipping=plan.clipping,
            scaler=grad_scaler(plan.precision, device),
            autocast=autocast_of(plan.precision, device),
            measure_norm=plan.measure_grad_norm,
        )
        self.last_epoch = plan.starting_epoch - 1
        """The last epoch completed so far (what a run that fails now reports)."""
        self.schedule = plan.schedule or Schedule(max_epochs=plan.num_epochs)
        self._units: Iterator[Any] | None = None  # the train pass under way, kept across rounds
        self._passes = plan.starting_epoch - 1  # train passes completed (restored on resume)
        self._consumed = 0  # items of the pass under way consumed so far
        self._iteration = self._round_passes = 0  # the round's train items and passes
        self._marks = RoundMarks(0, 0, 0.0)  # the last checkpoint's, for checkpoint_every
        # each reported item's stamp (progress, lr, step, norm) until the run hands it back
        self._stamps: deque[tuple[Progress, float | None, int, torch.Tensor | None]] = deque()
        self._last_saved: tuple[int, TrainingRecords] | None = None
        self._stop_reason: str | None = None
        self._early_stopped = False

    def execute(self) -> LoopResult:
        """Train from ``plan.starting_epoch`` (a round) until the schedule ends (or a stop)."""
        plan, processor, schedule = self.plan, self.processor, self.schedule
        self._check_same()
        if plan.starting_epoch > 1:
            self._restore(plan.starting_epoch - 1)
        per_pass = steps_per_pass(self.run.loaders["train"], plan.grads_accumulation)
        processor.process_train(Start(schedule.rounds(per_pass), plan.starting_epoch))
        self._marks = RoundMarks(self.window.optimizer_steps, self._passes, time.monotonic())
        with checkpointed(plan.gradient_checkpointing, *self.run.replicas):
            epoch = plan.starting_epoch
            while not schedule.ran_out(self.window.optimizer_steps, self._passes):
                for hooks in plan.hooks:
                    hooks.on_epoch_start(epoch)
                self._train_pass(epoch)
                if self._stop_reason is not None:
                    break
                self._valid_pass(epoch)
                self.last_epoch = epoch
                if self._end_epoch(epoch) or self._stop_reason is not None:
                    break
                _, stopper = self.run.report((), self.interrupter.should_stop())
                if stopper is not None:  # asked between two rounds
                    self._stopped_by(stopper)
                    break
                epoch += 1
        if self._stop_reason is not None and not self._early_stopped:
            self._keep_last_epoch()
            processor.flush()  # the epoch lines, written by the metrics thread, come first
            log.info("Training interrupted: %s", self._stop_reason)
        complete = self._stop_reason is None or self._early_stopped
        return LoopResult(self.last_epoch, self._stop_reason, complete)

    # --- the passes ----------------------------------------------------------------------------

    def _train_pass(self, epoch: int) -> None:
        """Train round ``epoch``: one pass by default, else until the schedule ends the round
        (``_schedule.py``); a pass left mid-way goes on in the next round."""
        run, processor, schedule = self.run, self.processor, self.schedule
        total = None if schedule.by_steps else run.loaders["train"].num_items()
        processor.process_train(StartSplit(epoch, total))
        for hooks in self.plan.hooks:
            hooks.on_split_start(Split.TRAIN, epoch)
        for replica in run.replicas:
            replica.train()
        self._iteration = self._round_passes = 0
        self._stamps.clear()  # a process that logs nothing (DDP rank > 0) never pops its own
        while self._train_units(epoch):
            pass
        processor.process_train(EndSplit(epoch))
        for hooks in self.plan.hooks:
            hooks.on_split_end(Split.TRAIN, epoch)

    def _train_units(self, epoch: int) -> bool:
        """Train units of the current pass (starting one if none is under way) until the round
        ends (False), a stop (False) or the pass ends with the round going on (True)."""
        learner, run, window = self.learner, self.run, self.window
        if self._units is None:
            self._units, self._consumed = run.train_pass(), 0
        units, stamps = self._units, self._stamps
        for unit, progress in units:
            items, self._consumed = (
                progress.items_processed - self._consumed,
                progress.items_processed,
            )
            # the unit's iteration counts the items not logged yet too (a DDP chunk's)
            context = window.context(
                epoch, self._iteration + len(stamps) + 1, unit, items, progress
            )
            norm, stepped = None, False
            with step_context(context):  # optimize() may read the batch too
                if context.autocast is None:
                    outputs = run.train_step(learner, unit)
                else:
                    with torch.autocast(*context.autocast):
                        outputs = run.train_step(learner, unit)
                if window.closes(progress):
                    norm, stepped = window.step(learner), True
                    run.after_optimizer_step()
            reported = [output.item for output in outputs]
            # the outputs hold this step's gradients: kept until the next step returned, they
            # would double the gradients' memory during its backward
            del outputs
            stamps.extend(
                [(progress, learner.lr_current, window.optimizer_steps, norm)] * len(reported)
            )
            logged, stopper = run.report(reported, self.interrupter.should_stop())
            self._log_train(logged)
            step = window.optimizer_steps
            ended = progress.is_completed
            if ended:
                self._end_train_pass(units)
            round_ends = stopper is None and self.schedule.round_ends(
                step, self._passes, self._round_passes, stepped=stepped, pass_ended=ended
            )
            if round_ends and not ended:  # mid-pass: what the run still holds is this round's
                logged, stopper = run.report((), False)
                self._log_train(logged)
            if stopper is not None:
                window.drop()
                self._stopped_by(stopper)
                return False
            if round_ends:
                return False
            if ended:
                return True
        if self._units is not None:  # a pass that never said it was complete (or was empty)
            if self._consumed == 0 and self.schedule.max_epochs is None:
                raise ValueError(
                    "the train loader's pass has no batch, so max_steps can never be reached: "
                    "give it items, or bound the run with num_epochs(...)"
                )
            self._end_train_pass(units)
        return not self.schedule.round_ends(
            window.optimizer_steps, self._passes, self._round_passes, stepped=False, pass_ended=True
        )

    def _log_train(self, logged: Sequence[Any]) -> None:
        """Process the items a run hands back, each with its own unit's stamp (a run may hand
        back earlier units' items later: DDP's chunks)."""
        for item in logged:
            self._iteration += 1
            at, lr, step, norm = self._stamps.popleft()
            self.processor.process_train(
                ProcessedItem(TrainingItem(item, at, self._iteration, lr, step, norm))
            )

    def _end_train_pass(self, units: Iterator[Any]) -> None:
        """The train pass ended: count it and let its iterator finish (it has nothing left)."""
        self._passes += 1
        self._round_passes += 1
        self._units = None
        for _ in units:  # a complete pass yields nothing more; this only ends its generator
            break

    def _valid_pass(self, epoch: int) -> None:
        if self.plan.validate:  # train only: no valid split, no valid events
            self._validate(epoch)
        self.processor.process_train(EndEpoch(epoch))
        for hooks in self.plan.hooks:
            hooks.on_epoch_end(epoch)

    def _validate(self, epoch: int) -> None:
        run, processor = self.run, self.processor
        processor.process_valid(StartSplit(epoch, run.loaders["valid"].num_items()))
        for hooks in self.plan.hooks:
            hooks.on_split_start(Split.VALID, epoch)
        model = self.learner.model
        model.eval()
        autocast = self.window.autocast
        with torch.inference_mode():
            iteration = 0
            stamps: deque[tuple[Progress, int]] = deque()
            for batch, progress in run.valid_pass():
                if autocast is None:
                    output = run.inference_step(batch)
                else:
                    with torch.autocast(*autocast):
                        output = run.inference_step(batch)
                stamps.append((progress, self.window.optimizer_steps))
                items, stopper = run.report([output], self.interrupter.should_stop())
                for item in items:
                    iteration += 1
                    at, step = stamps.popleft()
                    processor.process_valid(
                        ProcessedItem(TrainingItem(item, at, iteration, None, step))
                    )
                if stopper is not None:
                    self._stopped_by(stopper)
                    break
        processor.process_valid(EndSplit(epoch))
        for hooks in self.plan.hooks:
            hooks.on_split_end(Split.VALID, epoch)

    # --- the end of an epoch ------------------------------------------------------------------

    def _end_epoch(self, epoch: int) -> bool:
        """Flush, checkpoint, then ask early stopping; True when early stopping ends the run.

        Nothing is checkpointed once the metrics thread has failed, so non-finite weights are
        never saved.
        """
        plan, run, learner = self.plan, self.run, self.learner
        monitor = learner.monitor
        if plan.checkpointer is None and plan.early_stopping is None and monitor is None:
            learner.end_epoch()
            return False
        self.processor.flush()
        if run.decide(self.processor.error is not None):
            self._stopped_by(0)  # launch reports the metrics thread's error
            return True
        value = None
        if monitor is not None:
            mine = self.store.find_metric(monitor, epoch, Split.VALID) if self.main else None
            value = run.decide(mine)
        learner.end_epoch(value)  # the scheduler's new state goes into this epoch's checkpoint
        steps, passes = self.window.optimizer_steps, self._passes
        if plan.checkpointer is not None:
            due = self._marks.take(self.schedule, steps, passes)
            interval = self.schedule.checkpoint
            if interval is not None and interval.unit == "seconds":
                due = run.decide(due)  # the processes' clocks differ: the main process's says
            if due:
                self._checkpoint(plan.checkpointer, epoch)
        if plan.early_stopping is None:
            return False
        reason = self._ask_early_stopping(plan.early_stopping, epoch) if self.main else None
        reason = run.decide(reason)
        if reason is None:
            return False
        self._stop_reason, self._early_stopped = reason, True
        return True

    def _ask_early_stopping(self, strategy: EarlyStoppingStrategy, epoch: int) -> str | None:
        if not strategy.should_stop(epoch, self.store):
            return None
        return strategy.reason or f"early stopping after epoch {epoch}"

    def _checkpoint(self, checkpointer: RunCheckpointer, epoch: int) -> None:
        states = self.run.gather(rng_state())
        run = self.run  # a sharded model: every rank writes its shards, rank 0 the rest
        shards = (
            run.write_shards(checkpointer.directory, epoch)
            if isinstance(run, ShardingRun)
            else None
        )
        if not self.main or states is None:
            return
        self.store.sync()  # the logs up to here reach the disk before the checkpoint commits
        records = snapshot_run(
            epoch,
            self.learner,
            self.run.loaders,
            states,
            self.plan.early_stopping,
            self._loop_state(),
            self.plan.stateful,
            shards,
        )
        self._last_saved = (epoch, checkpointer.checkpoint(epoch, records, self.store))

    # --- stops and resume ---------------------------------------------------------------------

    def _stopped_by(self, stopper: int) -> None:
        """Remember why the run stops: this process's interrupter, or another process."""
        own = stopper == self.run.rank and self.interrupter.should_stop()
        reason = self.interrupter.message if own else f"rank {stopper} stopped training"
        self._stop_reason = reason or "interrupted"

    def _keep_last_epoch(self) -> None:
        """After a stop: make sure the last complete epoch's checkpoint is on disk, even if the
        strategy had not kept it, so a resume reruns the abandoned epoch and ends exactly as an
        uninterrupted run."""
        checkpointer = self.plan.checkpointer
        if checkpointer is None or self._last_saved is None or self.processor.error is not None:
            return
        checkpointer.save(*self._last_saved)

    def _restore(self, epoch: int) -> None:
        checkpointer = self.plan.checkpointer
        if checkpointer is None:
            raise ValueError(f"resuming at epoch {epoch + 1} needs checkpointers")
        run = self.run
        loop = restore_run(
            checkpointer,
            epoch,
            self.learner,
            run.loaders,
            self.plan.early_stopping,
            run.rank,
            self.plan.stateful,
        )
        window = self.window
        where = f"the checkpoint of epoch {epoch} in {checkpointer.directory}"
        window.optimizer_steps = loop_count(loop, "optimizer_steps", 0, where)
        self._passes = loop_count(loop, "train_passes", epoch, where)  # older: epoch boundaries
        self._consumed = loop_count(loop, "pass_items", 0, where)
        scaler_state = loop.get("grad_scaler")
        if window.scaler is not None and isinstance(scaler_state, dict):
            window.scaler.load_state_dict(scaler_state)

    def _loop_state(self) -> dict[str, Any]:
        """What the loop itself keeps in a checkpoint for an exact resume."""
        window = self.window
        state: dict[str, Any] = {
            "optimizer_steps": window.optimizer_steps,
            "train_passes": self._passes,
            "pass_items": 0 if self._units is None else self._consumed,
        }
        if window.scaler is not None:
            state["grad_scaler"] = window.scaler.state_dict()
        return state

    def _check_same(self) -> None:
        """Every process must run the same training; a difference would hang a collective."""
        self.run.check_same(same_training_facts(self.plan, self.run.loaders, self.schedule))
