"""The training loop: rounds, the train and valid passes, checkpoints, early stopping, stops.

Every strategy runs this loop; a strategy only places the model and says how a unit of work
runs and how gradients combine (``train/_strategy/base.py``). ``launch`` (``_training.py``)
plans the run, opens its session (the directory, the logs, the renderer, ``train-worker``) and
places the model before it. The loop reads the configuration through the plan
(``plan.config``) and keeps where it is in the run's counters (``_counters.py``)::

    run.check_same(facts)                               # every process runs the same training
    saver.begin(start)                                  # resuming: every process restores the
                                                        # run's state from the checkpoint of a
                                                        # round end, or of a step inside a round
                                                        # (_state/); then the
                                                        # directory's recorded end is forgotten
    Start(rounds, starting round, total steps when max_steps bounds the run, steps taken,
          whether a stop writes a mid-round checkpoint)
    for each round r from the starting one, until the schedule ends:   # a round ("epoch" in
                                                        # events and files): an epoch, or N
                                                        # steps or N epochs (_schedule.py)
        StartSplit(r, train items, None in a step run) ; every replica in train mode
                                                        # hooks: _hooks.py
        (a round resumed at its last step, whose training was over: straight to EndSplit)
        for unit, progress in the train pass under way, or a new one (run.train_pass()):
            with the window's step context (round, iteration, optimizer steps, the unit;
                                             autocast and loss scaling under mixed precision):
                outputs = run.train_step(learner, unit)    # forward + backward; gradients in
                                                           # the main model's .grad slots
            if the window closes (n units, or the pass is complete):   (_window.py)
                the optimizer step: lr, unscale, clip, measure, step or skip on non-finite
                16-mixed gradients (a closure optimizer runs the unit again for each of its
                evaluations but the first); run.after_optimizer_step()
            items, stopper = run.report(outputs' items, interrupter.should_stop())
            ProcessedItem per item (iteration counts items; lr = the last step's lr; the
                values the step logged); a run may return earlier units' items later (DDP's
                chunks): each gets its unit's stamp
            if asked to stop (stopper is not None): train on to the end of the window, then
                take a mid-round checkpoint there and stop after EndSplit (without mid-round
                checkpoints: the partial window is dropped and the round abandoned)
            the round ends here (N steps, N passes, max_steps or num_epochs reached): the pass
                goes on in the next round; else at the pass's end: the next pass
            else, after an optimizer step that checkpoint_every(steps=N | seconds=T) says is
                due: a mid-round checkpoint (the same as at a stop, without stopping):
                    what the run still holds is logged; flush train-worker; the saver
                    snapshots the run's state (every process takes part)
        EndSplit(r)
        if stopped: go to "stop"
        StartSplit(r, valid items) ; the inference pass over the valid loader (_inference.py:
            main model in eval mode, under inference_mode): ProcessedItem per output; a stop
            asked meanwhile waits for the pass's end, so the round and its checkpoint are whole
                                                        # (skipped when training only)
            with several validation sets (_valid_sets.py): a pass over each in order, the
            main one first, inside that one split (its items: every set's), each
            ProcessedItem naming its set; a stop waits for the last set's end
        EndSplit(r) ; EndEpoch(r)
        if checkpointer, early stopping or a metric-driven scheduler:
            flush train-worker (the round's values are in the logs now)
            if the metrics thread failed (the main process says): end here, write nothing
            a per-epoch scheduler advances (ReduceLROnPlateau with its monitored valid value)
            checkpoint(r) as checkpoint_every says (always the last round; the checkpointing
                strategy decides what is kept)
            early stopping: the main process asks it; every process stops with its reason
        asked to stop (any process): go to "stop"
    stop: the last complete round's checkpoint is written if the strategy had not kept it (a
          resume starts from it, or from the newer mid-round checkpoint); flush; log the reason
    return the last complete round and the stop reason (None: the schedule's end)

An exception anywhere (a step, a loader, a checkpoint write) leaves the loop as it is; the
session then finishes the run (``_session.py``). The loop never reads a tensor back to the host:
the metrics thread does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ember._protocols import member
from ember.data import Progress
from ember.train._callbacks.base import RunView, StopRequest
from ember.train._callbacks.called import run_methods
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpointing import CheckpointSaver
from ember.train._counters import RunCounters
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._events import EndEpoch, EndSplit, ProcessedItem, Start, StartSplit, TrainingItem
from ember.train._gradient_checkpointing import checkpointed
from ember.train._inference import inference_pass
from ember.train._learner import Learner
from ember.train._logger.store import EventStore
from ember.train._plan import RunPlan, same_training_facts
from ember.train._precision import autocast_of, grad_scaler
from ember.train._processor import EventProcessor
from ember.train._schedule import steps_per_pass
from ember.train._state import Resumed
from ember.train._step import StepContext, TrainOutput, step_context
from ember.train._strategy.base import LocalRun, StrategyRun, model_device
from ember.train._threshold import ThresholdStop
from ember.train._valid_sets import loader_key
from ember.train._vocabulary import Split
from ember.train._window import OptimizerWindow, UnitClosure

__all__ = ["LoopOutcome", "Stop", "TrainingLoop"]

log = logging.getLogger("ember.train")

_Stamp = tuple[Progress, float | None, int, torch.Tensor | None, dict[str, Any] | None]
"""A reported unit's progress, lr, optimizer steps, gradient norm and logged values, until its
items log."""


@dataclass(frozen=True, slots=True)
class LoopOutcome:
    """How the loop ended: the last round completed and, if it stopped early, why; ``complete``:
    the run is over (its schedule's end, or early stopping), not interrupted."""

    last_round: int
    stop_reason: str | None = None
    complete: bool = False


class TrainingLoop:
    """Runs ``plan`` with ``learner`` on a strategy's ``run`` from ``start`` (a checkpoint to
    resume from, or None); see the module doc. ``counters`` is the run's record of where it is:
    the loop advances it."""

    def __init__(
        self,
        plan: RunPlan,
        learner: Learner[Any],
        run: StrategyRun,
        counters: RunCounters,
        processor: EventProcessor,
        store: EventStore,
        start: ResumePoint | None = None,
    ) -> None:
        config = plan.config
        self.plan, self.learner, self.run, self.counters = plan, learner, run, counters
        self.processor, self.store, self.start = processor, store, start
        self.interrupter = config.interrupter
        device = model_device(learner.model)
        self.window = OptimizerWindow(
            config.grads_accumulation,
            mean=config.mean_accumulation,
            clipping=config.clipping,
            scaler=grad_scaler(config.precision, device),
            autocast=autocast_of(config.precision, device),
            measure_norm=plan.measure_grad_norm,
            counters=counters,
        )
        self.saver = CheckpointSaver(plan, learner, run, counters, store, self.window.scaler)
        self._units: Iterator[Any] | None = None  # the train pass under way, kept across rounds
        self._stamps: deque[_Stamp] = deque()
        self._stop: Stop | None = None
        self._closure = learner.steps_with_closure  # the optimizers are built (bind)
        self.callbacks = plan.callbacks
        self._wish = StopRequest()  # a callback's stop (RunView.stop), or a threshold's
        self.view = RunView(
            learner,
            counters,
            loaders=run.loaders,
            directory=config.directory,
            main=plan.main,
            rank=run.rank,
            stop=self._wish,
        )
        before = self.callbacks.before_step
        self._before_step = (
            (lambda: run_methods(before, "on_before_optimizer_step", (self.view,)))
            if before
            else None
        )
        self._per_step = bool(
            self.callbacks.batch_start
            or before
            or self.callbacks.after_step
            or self.callbacks.batch_end
        )
        self._local = isinstance(run, LocalRun)  # one process: a threshold stops at once
        thresholds = [logger for logger in plan.loggers if isinstance(logger, ThresholdStop)]
        self._train_thresholds = [t for t in thresholds if t.split is Split.TRAIN]
        self._valid_thresholds = [t for t in thresholds if t.split is Split.VALID]

    def execute(self) -> LoopOutcome:
        """Train from the starting round until the schedule ends (or a stop)."""
        plan, counters, start = self.plan, self.counters, self.start
        starting = 1 if start is None else start.starting_epoch
        self.run.check_same(
            same_training_facts(
                plan, self.run.loaders, starting, None if start is None else start.step
            )
        )
        resumed = self.saver.begin(start)
        per_pass = steps_per_pass(self.run.loaders["train"], plan.config.grads_accumulation)
        schedule = plan.schedule
        total = schedule.total_steps(per_pass)
        stop_checkpoints = plan.mid_round_blocker is None
        rounds = schedule.rounds(per_pass)
        self.processor.process_train(
            Start(rounds, starting, total, counters.optimizer_steps, stop_checkpoints)
        )
        self.view._epoch = counters.last_round
        self.callbacks.call("on_run_start", self.view)
        with checkpointed(plan.gradient_checkpointing, *self.run.replicas):
            self._rounds(resumed)
        self.learner.end_training()  # after the last checkpoint: as a raw loop leaves the lrs
        stop = self._stop
        if stop is not None and not stop.complete:
            if self.processor.error is None:  # never from weights a failed thread saw go bad
                self.saver.keep_last_round()
            self.processor.flush()  # the round lines, written by the metrics thread, come first
            log.info("Training interrupted: %s", stop.reason)
        self.callbacks.call("on_run_end", self.view)
        if stop is None:
            return LoopOutcome(counters.last_round, None, True)
        return LoopOutcome(counters.last_round, stop.reason, stop.complete)

    def _rounds(self, resumed: Resumed) -> None:
        """Every round from the one ``resumed`` names until the schedule ends or a stop."""
        counters, schedule, callbacks = self.counters, self.plan.schedule, self.callbacks
        round, mid_round = resumed.round, resumed if resumed.mid_round else None
        while mid_round or not schedule.ran_out(counters.optimizer_steps, counters.passes):
            self.view._epoch = round
            callbacks.call("on_epoch_start", round)
            self._train_split(round, mid_round)
            mid_round = None
            if self._stop is not None:
                return
            self._valid_split(round)
            counters.last_round = round
            if self._end_round(round) or self._stop is not None:
                return
            _, stopper = self.run.report((), self._wants_stop())
            if stopper is not None:  # asked between two rounds (or during validation)
                self._stopped_by(stopper)
                return
            round += 1

    # --- the train split -----------------------------------------------------------------------

    def _train_split(self, round: int, resumed: Resumed | None) -> None:
        """Train the round ``round``: one pass by default, else until the schedule ends the round
        (``_schedule.py``); a pass left mid-way goes on in the next round. A round ``resumed``
        from a mid-round checkpoint goes on with its counters (straight to its end when its
        training was over)."""
        run, processor, counters = self.run, self.processor, self.counters
        total = None if self.plan.schedule.by_steps else run.loaders["train"].num_items()
        processor.process_train(StartSplit(round, total, counters.pass_items if resumed else 0))
        self.callbacks.call("on_split_start", Split.TRAIN, round)
        for replica in run.replicas:
            replica.train()
        if resumed is None:
            counters.round_items = counters.round_passes = 0
        self._stamps.clear()  # a process that logs nothing (DDP rank > 0) never pops its own
        if resumed is None or not resumed.trained:
            while self._train_units(round):
                pass
        processor.process_train(EndSplit(round))
        self.callbacks.call("on_split_end", Split.TRAIN, round)

    def _train_units(self, round: int) -> bool:
        """Train units of the current pass (starting one if none is under way) until the round
        ends (False), a stop (False) or the pass ends with the round going on (True)."""
        if self._units is None:
            self._units = self.run.train_pass()  # a restored loader goes on mid-pass
        units = self._units
        for unit, progress in units:
            stepped = self._train_unit(round, unit, progress)
            ended = progress.is_completed
            if ended:
                self._end_train_pass(units)
            verdict = self._after_unit(round, stepped=stepped, ended=ended)
            if verdict is not None:
                return verdict
        return self._pass_ran_out(units)

    def _train_unit(self, round: int, unit: Any, progress: Progress) -> bool:
        """One unit of work: forward and backward, the optimizer step when its window closes,
        its items reported and logged; True when it stepped."""
        learner, run, window, counters = self.learner, self.run, self.window, self.counters
        items, counters.pass_items = (
            progress.items_processed - counters.pass_items,
            progress.items_processed,
        )
        # the unit's iteration counts the items not logged yet too (a DDP chunk's)
        context = window.context(
            round, counters.round_items + len(self._stamps) + 1, unit, items, progress
        )
        norm, stepped = None, False
        with step_context(context):  # optimize() may read the batch too
            if self._per_step:
                outputs, norm, stepped = self._unit_with_callbacks(context, unit, progress)
            else:
                outputs = self._forward(unit, context)
                if window.closes(progress):
                    norm, stepped = self._step(outputs, unit, context), True
        reported = [output.item for output in outputs]
        # the outputs hold this step's gradients: kept until the next step returned, they would
        # double the gradients' memory during its backward
        del outputs
        values = context.values or None  # what the step logged (current_step().log)
        stamp = (progress, learner.lr_current, counters.optimizer_steps, norm, values)
        self._stamps.extend([stamp] * len(reported))
        logged, stopper = run.report(reported, self._wants_stop())
        self._log_train(logged)
        if self._train_thresholds and stopper is None:
            stopper = self._threshold_reached(self._train_thresholds)
        if stopper is not None and self._stop is None:
            self._ask_stop(stopper)
        return stepped

    def _step(self, outputs: Sequence[TrainOutput[Any]], unit: Any, context: StepContext) -> Any:
        """The optimizer step of the window the unit closes; the gradient norm, if measured."""
        closure = None
        if self._closure:  # LBFGS: the unit again for each evaluation it asks for
            closure = UnitClosure(outputs, lambda: self._again(unit, context))
        norm = self.window.step(self.learner, closure, before=self._before_step)
        self.run.after_optimizer_step()
        return norm

    def _unit_with_callbacks(
        self, context: StepContext, unit: Any, progress: Progress
    ) -> tuple[Sequence[TrainOutput[Any]], Any, bool]:
        """The unit with the callbacks' per-step points around it (``_callbacks/base.py``): its
        outputs, the gradient norm if measured, and whether it stepped."""
        callbacks, view = self.callbacks, self.view
        norm, stepped = None, False
        view._unit = (context, None)
        try:
            if callbacks.batch_start:
                run_methods(callbacks.batch_start, "on_train_batch_start", (view,))
            outputs = self._forward(unit, context)
            view._unit = (context, outputs)
            if self.window.closes(progress):
                norm, stepped = self._step(outputs, unit, context), True
                if callbacks.after_step:
                    run_methods(callbacks.after_step, "on_after_optimizer_step", (view,))
            if callbacks.batch_end:
                run_methods(callbacks.batch_end, "on_train_batch_end", (view,))
        finally:
            view._unit = None
        return outputs, norm, stepped

    def _forward(self, unit: Any, context: StepContext) -> Sequence[TrainOutput[Any]]:
        """The unit's forward and backward through the strategy (under autocast, if any)."""
        if context.autocast is None:
            return self.run.train_step(self.learner, unit)
        with torch.autocast(*context.autocast):
            return self.run.train_step(self.learner, unit)

    def _again(self, unit: Any, context: StepContext) -> Sequence[TrainOutput[Any]]:
        """The unit once more, on the parameters a closure optimizer just changed."""
        self.run.after_optimizer_step()  # the replicas get them too
        return self._forward(unit, context)

    def _after_unit(self, round: int, *, stepped: bool, ended: bool) -> bool | None:
        """What follows a unit: None to go on with the pass, or :meth:`_train_units`' answer."""
        counters = self.counters
        step = counters.optimizer_steps
        round_ends = self.plan.schedule.round_ends(
            step, counters.passes, counters.round_passes, stepped=stepped, pass_ended=ended
        )
        stop = self._stop
        if stop is not None:
            if not stop.pending:  # taken already (the metrics thread failed)
                return False
            if not stepped:
                return None  # a stop waits for the window to close: a step leaves it empty
            if not stop.checkpoint or self._checkpoint_mid_round(round, trained=round_ends):
                self._stop = dataclasses.replace(stop, pending=False)
            return False
        if round_ends:
            if not ended:  # mid-pass: what the run still holds is this round's
                self._log_train(self.run.report((), False)[0])
            return False
        if stepped and self.saver.mid_round_due(step) and not self._checkpoint_mid_round(round):
            return False  # the metrics thread failed: the run ends (the session reports it)
        return True if ended else None

    def _pass_ran_out(self, units: Iterator[Any]) -> bool:
        """The pass's iterator ended without a unit saying it was the last (an empty pass, a
        stream): end it; True when the round goes on with another pass."""
        counters = self.counters
        stop = self._stop
        if stop is not None:  # a pass that ended without saying so (no step)
            self.window.drop()
            self._stop = dataclasses.replace(stop, pending=False)
            return False
        if self._units is not None:
            if counters.pass_items == 0 and self.plan.schedule.max_epochs is None:
                raise ValueError(
                    "the train loader's pass has no batch, so max_steps can never be reached: "
                    "give it items, or bound the run with num_epochs(...)"
                )
            self._end_train_pass(units)
        return not self.plan.schedule.round_ends(
            counters.optimizer_steps,
            counters.passes,
            counters.round_passes,
            stepped=False,
            pass_ended=True,
        )

    def _log_train(self, logged: Sequence[Any]) -> None:
        """Process the items a run hands back, each with its own unit's stamp (a run may hand
        back earlier units' items later: DDP's chunks)."""
        counters = self.counters
        for item in logged:
            counters.round_items += 1
            at, lr, step, norm, values = self._stamps.popleft()
            self.processor.process_train(
                ProcessedItem(TrainingItem(item, at, counters.round_items, lr, step, norm, values))
            )

    def _end_train_pass(self, units: Iterator[Any]) -> None:
        """The train pass ended: count it and let its iterator finish (it has nothing left)."""
        counters = self.counters
        counters.passes += 1
        counters.round_passes += 1
        counters.pass_items = 0
        self._units = None
        for _ in units:  # a complete pass yields nothing more; this only ends its generator
            break

    def _checkpoint_mid_round(self, round: int, *, trained: bool = False) -> bool:
        """Checkpoint at this optimizer step inside the round ``round`` (``trained``: the round's
        training is over, as at a stop on its last step), once every item the run holds is
        logged and processed; False when the metrics thread failed (nothing is written, the
        run ends)."""
        self._log_train(self.run.report((), False)[0])  # what the run still holds comes first
        self.processor.flush()  # every train metric has seen every item logged
        if self.run.decide(self.processor.error is not None):
            self._stopped_by(0)  # the session reports the metrics thread's error
            return False
        self.saver.mid_round(round, trained=trained)
        self.callbacks.call("on_checkpoint_saved", round, self.counters.optimizer_steps)
        return True

    # --- the valid split and the end of a round -----------------------------------------------

    def _valid_split(self, round: int) -> None:
        if self.plan.validates:  # train only: no valid split, no valid events
            self._validate(round)
        self.processor.process_train(EndEpoch(round))
        self.callbacks.call("on_epoch_end", round)

    def _validate(self, round: int) -> None:
        """The valid split of the round ``round``: every validation set in order, the main one
        first (``_valid_sets.py``), each item tagged with its set."""
        run, processor, callbacks = self.run, self.processor, self.callbacks
        sets = [None, *(name for name, _ in self.plan.config.valid_sets)]
        sizes = [run.loaders[loader_key(name)].num_items() for name in sets]
        total = None if None in sizes else sum(size or 0 for size in sizes)
        processor.process_valid(StartSplit(round, total))
        callbacks.call("on_split_start", Split.VALID, round)
        step = self.counters.optimizer_steps
        for name in sets:
            outputs = inference_pass(
                run,
                loader_key(name),
                autocast=self.window.autocast,
                step=self.learner.inference_step,
                split=Split.VALID.value,
                epoch=round,
                optimizer_steps=step,
            )
            for iteration, (item, progress, values) in enumerate(outputs, 1):
                done = TrainingItem(item, progress, iteration, None, step, None, values)
                processor.process_valid(ProcessedItem(done, name))
        processor.process_valid(EndSplit(round))
        callbacks.call("on_split_end", Split.VALID, round)
        if callbacks.methods("on_validation_end"):
            callbacks.call("on_validation_end", round, self._valid_values(round))
        if self._valid_thresholds:
            self._threshold_reached(self._valid_thresholds)

    def _valid_values(self, round: int) -> dict[str, float]:
        """The valid metrics' epoch values of round ``round``, the main process's on every
        process (the metrics thread is flushed first: a host sync once a round)."""
        self.processor.flush()
        values = self.store.epoch_values(Split.VALID, round) if self.plan.main else {}
        agreed: dict[str, float] = self.run.decide(values)
        return agreed

    def _end_round(self, round: int) -> bool:
        """Flush, checkpoint, then ask early stopping; True when early stopping ends the run.

        Nothing is checkpointed once the metrics thread has failed, so non-finite weights are
        never saved.
        """
        plan, run, learner = self.plan, self.run, self.learner
        stopping = plan.config.early_stopping
        monitor = learner.monitor
        if plan.checkpointer is None and stopping is None and monitor is None:
            learner.end_epoch()
            return False
        self.processor.flush()
        if run.decide(self.processor.error is not None):
            self._stopped_by(0)  # the session reports the metrics thread's error
            return True
        value = None
        if monitor is not None:
            mine = self.store.find_metric(monitor, round, Split.VALID) if plan.main else None
            value = run.decide(mine)
        learner.end_epoch(value)  # the scheduler's new state goes into this round's checkpoint
        if self.saver.round_end(round):
            self.callbacks.call("on_checkpoint_saved", round, None)
        if stopping is None:
            return False
        reason = None
        if plan.main and stopping.should_stop(round, self.store):
            reason = member(stopping, EarlyStoppingStrategy, "reason")
            reason = reason or f"early stopping after epoch {round}"
        reason = run.decide(reason)
        if reason is None:
            return False
        self._stop = Stop(reason, complete=True)
        return True

    # --- stops ---------------------------------------------------------------------------------

    def _wants_stop(self) -> bool:
        """Whether this process asks to stop: the interrupter (Ctrl-C, a signal, a failed
        metrics thread), a callback, or a value that reached a ``stop_when`` threshold."""
        return self._wish.reason is not None or self.interrupter.should_stop()

    def _threshold_reached(self, thresholds: Sequence[ThresholdStop]) -> int | None:
        """After the values of ``thresholds``' split were logged: processed now (a host sync),
        and a threshold reached asks the run to stop. In one process it stops here (this
        process is the stopper); across processes the stop goes with the next report, so every
        process stops at the same step."""
        self.processor.flush()
        for threshold in thresholds:
            if threshold.reason is not None:
                self._wish.ask(threshold.reason)
                return self.run.rank if self._local else None
        return None

    def _ask_stop(self, stopper: int) -> None:
        """A stop was asked inside a round: train on to the end of the window under way, take
        a mid-round checkpoint there when the run takes them, then stop."""
        blocker = self.plan.mid_round_blocker
        if blocker is not None and self.plan.checkpointer is not None and self.plan.main:
            log.warning(
                "training stopped inside epoch %d without a checkpoint there, because %s: a "
                "resume starts from the last checkpoint before it",
                self.counters.last_round + 1,
                blocker,
            )
        self._stop = Stop(self._reason(stopper), pending=True, checkpoint=blocker is None)

    def _stopped_by(self, stopper: int) -> None:
        """The run stops now: asked between rounds, or the metrics thread failed."""
        self._stop = Stop(self._reason(stopper))

    def _reason(self, stopper: int) -> str:
        """Why the run stops: this process's own reason (a callback's or a threshold's, or the
        interrupter's message), or the rank that asked."""
        own = self._wish.take()
        if own is not None:
            return own
        if stopper == self.run.rank and self.interrupter.should_stop():
            return self.interrupter.message or "interrupted"
        return f"rank {stopper} stopped training"


@dataclass(frozen=True, slots=True)
class Stop:
    """Why the run stops, and how far it is: asked inside a round (``pending``: training goes
    on to the end of the optimizer window under way, where a mid-round checkpoint is taken
    when ``checkpoint``), or taken (the run ends); ``complete``: early stopping ended a run
    that is over, not interrupted."""

    reason: str
    pending: bool = False
    checkpoint: bool = False
    complete: bool = False
