"""The training loop: rounds, the train and valid passes, checkpoints, early stopping, stops.

Every strategy runs this loop; a strategy only places the model and says how a unit of work
runs and how gradients combine (``train/_strategy/base.py``). ``launch`` (``_launch.py``) sets
up the run directory, the logs, the renderer and ``train-worker`` around it. The loop::

    run = strategy.start(learner, train, valid)        # model and loaders on their devices
    run.check_same(facts)                               # every process runs the same training
    if resuming after epoch r:                          # every process restores
        restore model, optimizer, scheduler, loaders, RNG states, early stopping and the
        checkpointing strategy from the checkpoint of epoch r
    if resuming at step k inside round r + 1 (a mid-round checkpoint): the same, plus the
        round's counters and lr; the main process: each train metric's running state, and the
        train logs of round r + 1 cut back to where the checkpoint left them (the loop's
        checkpoints: _loop_checkpoints.py; what they keep of the loop: _loop_state.py)
    Start(rounds, r + 1, total steps when max_steps bounds the run, steps taken, whether a
          stop writes a mid-round checkpoint)
    for epoch = r + 1, ... until the schedule ends:     # a round ("epoch"): an epoch, or N
                                                        # steps or N epochs (_schedule.py)
        StartSplit(epoch, train items, None in a step run) ; every replica in train mode
                                                        # hooks: _hooks.py
        (a round resumed at its last step, whose training was over: straight to EndSplit)
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
            if asked to stop (stopper is not None): train on to the end of the window, then
                take a mid-round checkpoint there and stop after EndSplit (without mid-round
                checkpoints: the partial window is dropped and the round abandoned)
            the round ends here (N steps, N passes, max_steps or num_epochs reached): the pass
                goes on in the next round; else at the pass's end: the next pass
            else, after an optimizer step that checkpoint_every(steps=N | seconds=T) says is
                due: a mid-round checkpoint (the same as at a stop, without stopping):
                    what the run still holds is logged; flush train-worker; every process's
                    RNG state gathered; the main process writes the records, each train
                    metric's state and each log's position (it syncs the logs first)
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
    stop: the last complete epoch's checkpoint is written if the strategy had not kept it (a
          resume starts from it, or from the newer mid-round checkpoint); flush; log the reason
    return the last complete epoch and the stop reason (None: num_epochs reached)

An exception anywhere (a step, a loader, a checkpoint write) leaves the loop as it is; ``launch``
then finishes the run (``_launch.py``). The loop never reads a tensor back to the host: the
metrics thread does.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ember.data import Progress
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._events import EndEpoch, EndSplit, ProcessedItem, Start, StartSplit, TrainingItem
from ember.train._gradient_checkpointing import checkpointed
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._loop_checkpoints import LoopCheckpoints
from ember.train._loop_plan import LoopPlan, LoopResult, same_training_facts
from ember.train._loop_state import LoopCounters
from ember.train._metric.store import EventStore
from ember.train._precision import autocast_of, grad_scaler
from ember.train._processor import EventProcessor
from ember.train._schedule import Schedule, steps_per_pass
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
        self._count = LoopCounters(passes=plan.starting_epoch - 1)  # restored on resume
        self._checkpoints = LoopCheckpoints(
            plan, self.schedule, learner, run, self.window, self._count, store, main=main
        )
        # each reported item's stamp (progress, lr, step, norm) until the run hands it back
        self._stamps: deque[tuple[Progress, float | None, int, torch.Tensor | None]] = deque()
        self._stopping: int | None = None  # asked to stop: the rank, until the window closes
        self._stop_reason: str | None = None
        self._early_stopped = False

    def execute(self) -> LoopResult:
        """Train from ``plan.starting_epoch`` (a round) until the schedule ends (or a stop)."""
        plan, processor, schedule, count = self.plan, self.processor, self.schedule, self._count
        self._check_same()
        if plan.resume_step is not None:
            self._checkpoints.restore(ResumePoint(plan.starting_epoch, plan.resume_step))
        elif plan.starting_epoch > 1:
            self._checkpoints.restore(ResumePoint(plan.starting_epoch - 1))
        per_pass = steps_per_pass(self.run.loaders["train"], plan.grads_accumulation)
        steps = self.window.optimizer_steps
        total_steps = schedule.total_steps(per_pass)
        rounds, stop_checkpoints = schedule.rounds(per_pass), plan.mid_round_blocker is None
        processor.process_train(
            Start(rounds, plan.starting_epoch, total_steps, steps, stop_checkpoints)
        )
        self._checkpoints.start()
        with checkpointed(plan.gradient_checkpointing, *self.run.replicas):
            epoch = plan.starting_epoch
            while count.resumed or not schedule.ran_out(self.window.optimizer_steps, count.passes):
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
            if self.processor.error is None:  # never from weights a failed thread saw go bad
                self._checkpoints.keep_last_round()
            processor.flush()  # the epoch lines, written by the metrics thread, come first
            log.info("Training interrupted: %s", self._stop_reason)
        complete = self._stop_reason is None or self._early_stopped
        return LoopResult(self.last_epoch, self._stop_reason, complete)

    # --- the passes ----------------------------------------------------------------------------

    def _train_pass(self, epoch: int) -> None:
        """Train round ``epoch``: one pass by default, else until the schedule ends the round
        (``_schedule.py``); a pass left mid-way goes on in the next round. A round resumed from
        a mid-round checkpoint goes on with its counters."""
        run, processor, schedule, count = self.run, self.processor, self.schedule, self._count
        resumed, count.resumed = count.resumed, False
        total = None if schedule.by_steps else run.loaders["train"].num_items()
        processor.process_train(StartSplit(epoch, total, count.consumed if resumed else 0))
        for hooks in self.plan.hooks:
            hooks.on_split_start(Split.TRAIN, epoch)
        for replica in run.replicas:
            replica.train()
        if not resumed:
            count.iteration = count.round_passes = 0
        self._stamps.clear()  # a process that logs nothing (DDP rank > 0) never pops its own
        if not (resumed and count.round_trained):
            while self._train_units(epoch):
                pass
        count.round_trained = False
        processor.process_train(EndSplit(epoch))
        for hooks in self.plan.hooks:
            hooks.on_split_end(Split.TRAIN, epoch)

    def _train_units(self, epoch: int) -> bool:
        """Train units of the current pass (starting one if none is under way) until the round
        ends (False), a stop (False) or the pass ends with the round going on (True)."""
        learner, run, window, count = self.learner, self.run, self.window, self._count
        if self._units is None:
            self._units = run.train_pass()  # a restored loader goes on mid-pass
        units, stamps = self._units, self._stamps
        for unit, progress in units:
            items, count.consumed = (
                progress.items_processed - count.consumed,
                progress.items_processed,
            )
            # the unit's iteration counts the items not logged yet too (a DDP chunk's)
            context = window.context(
                epoch, count.iteration + len(stamps) + 1, unit, items, progress
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
            round_ends = self.schedule.round_ends(
                step, count.passes, count.round_passes, stepped=stepped, pass_ended=ended
            )
            if stopper is not None and self._stopping is None and not self._stop_at_step(stopper):
                return False  # the round is abandoned (no mid-round checkpoints)
            if self._stopping is not None:
                if not stepped:
                    continue  # a stop waits for the window to close: a step leaves it empty
                if self._checkpoint_mid_round(epoch, trained=round_ends):
                    self._stopped_by(self._stopping)
                return False
            if round_ends and not ended:  # mid-pass: what the run still holds is this round's
                self._log_train(run.report((), False)[0])
            if round_ends:
                return False
            due = stepped and self._checkpoints.mid_round_due(step)
            if due and not self._checkpoint_mid_round(epoch):
                return False  # the metrics thread failed: the run ends (launch reports it)
            if ended:
                return True
        if self._stopping is not None:  # a pass that ended without saying so (no step)
            window.drop()
            self._stopped_by(self._stopping)
            return False
        if self._units is not None:  # a pass that never said it was complete (or was empty)
            if count.consumed == 0 and self.schedule.max_epochs is None:
                raise ValueError(
                    "the train loader's pass has no batch, so max_steps can never be reached: "
                    "give it items, or bound the run with num_epochs(...)"
                )
            self._end_train_pass(units)
        return not self.schedule.round_ends(
            window.optimizer_steps, count.passes, count.round_passes, stepped=False, pass_ended=True
        )

    def _log_train(self, logged: Sequence[Any]) -> None:
        """Process the items a run hands back, each with its own unit's stamp (a run may hand
        back earlier units' items later: DDP's chunks)."""
        count = self._count
        for item in logged:
            count.iteration += 1
            at, lr, step, norm = self._stamps.popleft()
            self.processor.process_train(
                ProcessedItem(TrainingItem(item, at, count.iteration, lr, step, norm))
            )

    def _end_train_pass(self, units: Iterator[Any]) -> None:
        """The train pass ended: count it and let its iterator finish (it has nothing left)."""
        self._count.passes += 1
        self._count.round_passes += 1
        self._count.consumed = 0
        self._units = None
        for _ in units:  # a complete pass yields nothing more; this only ends its generator
            break

    def _checkpoint_mid_round(self, epoch: int, *, trained: bool = False) -> bool:
        """Checkpoint at this optimizer step inside round ``epoch`` (``trained``: the round's
        training is over, as at a stop on its last step), once every item the run holds is
        logged and processed; False when the metrics thread failed (nothing is written, the
        run ends)."""
        self._log_train(self.run.report((), False)[0])  # what the run still holds comes first
        self.processor.flush()  # every train metric has seen every item logged
        if self.run.decide(self.processor.error is not None):
            self._stopped_by(0)  # launch reports the metrics thread's error
            return False
        self._checkpoints.mid_round(epoch, trained=trained, pass_open=self._units is not None)
        return True

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
        self._checkpoints.round_end(epoch, pass_open=self._units is not None)
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

    # --- stops and resume ---------------------------------------------------------------------

    def _stop_at_step(self, stopper: int) -> bool:
        """A stop was asked inside a round: True when the run trains on to the end of the
        window for a mid-round checkpoint; False when it abandons the round now (no mid-round
        checkpoints: the partial window is dropped, a resume starts from the last round end)."""
        blocker = self.plan.mid_round_blocker
        if blocker is None:
            self._stopping = stopper
            return True
        if self.plan.checkpointer is not None and self.main:
            log.warning(
                "training stopped inside epoch %d without a checkpoint there, because %s: a "
                "resume starts from the last checkpoint before it",
                self.last_epoch + 1,
                blocker,
            )
        self.window.drop()
        self._stopped_by(stopper)
        return False

    def _stopped_by(self, stopper: int) -> None:
        """Remember why the run stops: this process's interrupter, or another process."""
        own = stopper == self.run.rank and self.interrupter.should_stop()
        reason = self.interrupter.message if own else f"rank {stopper} stopped training"
        self._stop_reason = reason or "interrupted"

    def _check_same(self) -> None:
        """Every process must run the same training; a difference would hang a collective."""
        self.run.check_same(same_training_facts(self.plan, self.run.loaders, self.schedule))
