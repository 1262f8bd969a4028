"""Launching a configured run: what is set up around the loop, and how a run always ends.

::

    launch(config, learner):
        Ctrl-C, SIGTERM, SIGUSR1 routed to the interrupter until launch ends (_signals.py)
        main process: claim the run directory (_run_directory.py: its lock; a fresh run into
            another run's directory refused, or that run's files removed with overwrite())
        check the learner; find the starting epoch (a requested checkpoint must exist)
        the loggers: the file logs and the given ones (refused if nothing reads back what the
            summary, early stopping or checkpointing need)
        main process: experiment.log; the renderer; config.json;
            every logger's start(config) (an error there stops the launch, before training)
        resume_latest(): the newest usable checkpoint, skipped ones warned of in experiment.log
                         (none usable of several: CheckpointError, unless fresh_if_unusable);
                         a run already complete for num_epochs: warned of, and its result
                         returned without training (_finished.py)
        other processes: no files, no output (their events are dropped)
        start train-worker (the metrics thread)
        TrainingLoop(...).execute()                      # _loop.py: the epochs
        flush; summary.json and the table (main process, no error)
        finish, whatever happened (each step runs even if one before it failed):
            drain train-worker; log the error; finish the checkpoint writes; End(summary);
            stop train-worker; renderer.on_error(error); the artifacts the loggers asked for
            (the best checkpoint exported, the curves drawn); the loggers' end(summary, artifacts);
            close the loggers and the renderer
        result = LearningResult(model in eval mode, renderer, error, summary, stop reason,
                                the checkpoints and the best epoch)
        with_test tests, if training succeeded: result.evaluate(tests, the valid metrics,
                                                                the test checkpoint)
        the run ended (num_epochs, early stopping): its end recorded beside the checkpoints
        release the run directory
        a preemption signal (SIGTERM, SIGUSR1) and no error: SystemExit(75), to be requeued
        an error: raise TrainingError(result) from it (errors_in_result(): return the result)

An error during training is raised as ``TrainingError`` only after everything above is done
(or, with ``errors_in_result()``, returned as ``LearningResult.error``, with its traceback).
Each finishing step is guarded: the first error is the run's, any later one (a full disk under
``experiment.log``, a renderer whose ``on_error`` raises) a note on it. What ``launch`` raises
itself is refused before training starts: a bad learner, a directory in use, a missing
checkpoint, or ``resume_latest()`` finding only unusable checkpoints.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from ember._errors import CheckpointError, TrainingError
from ember.train._application_log import begin_attempt, experiment_log, warnings_to
from ember.train._checkpoint.export import best_epoch, model_checkpoints
from ember.train._checkpoint.file import atomic_write
from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.manifest import manifest_path
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.resume import resume_latest_point
from ember.train._checkpoint.run import RunCheckpointer
from ember.train._checkpoint.run_state import RunEnd, clear_run_end
from ember.train._checkpoint.strategy import (
    KeepLastNCheckpoints,
    default_checkpointing_strategy,
)
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._events import End
from ember.train._finished import finished_result, finished_run, run_result
from ember.train._gradient_checkpointing import checkpointed_modules
from ember.train._hooks import TrainingHooks
from ember.train._launch_checks import check_metric_names, check_monitor, check_tests
from ember.train._learner import Learner
from ember.train._logger.run import run_artifacts, run_loggers, wanted_artifacts
from ember.train._loop import TrainingLoop
from ember.train._loop_plan import LoopPlan, LoopResult, mid_round_blocker
from ember.train._metric.base import Numeric
from ember.train._metric.grad_norm import GradNormMetric
from ember.train._metric.registered import MetricsTraining
from ember.train._metric.store import EventStore
from ember.train._processor import (
    AsyncProcessorTraining,
    EventProcessor,
    FullEventProcessorTraining,
    SilentProcessor,
)
from ember.train._renderer.base import EvaluationRenderer, MetricsRenderer, WarningRenderer
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._renderer.default import default_renderer
from ember.train._result import LearningResult
from ember.train._run_config import run_configuration
from ember.train._run_directory import claim_for_run
from ember.train._schedule import Schedule, check_schedule, steps_per_pass
from ember.train._signals import graceful_stop
from ember.train._strategy.base import PrecisionStrategy, StrategyRun
from ember.train._strategy.single import SingleDevice
from ember.train._summary import LearnerSummary, describe_model
from ember.train._vocabulary import Split

__all__ = ["launch"]

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("ember.train")


def launch(config: TrainingConfig, learner: Learner[M]) -> LearningResult[M]:
    """Train ``learner`` as ``config`` says (see the module doc for the order of things)."""
    if not isinstance(learner, Learner):
        raise TypeError(f"launch needs a Learner, got {type(learner).__name__}")
    with graceful_stop(config.interrupter) as signals:  # the whole launch: _signals.py
        with claim_for_run(config):
            result = _launch(config, learner)
        signals.requeue_if_preempted(failed=result.error is not None)
    if result.error is None or config.errors_in_result:
        return result
    error = result.error
    raise TrainingError(
        f"training failed after {result.last_epoch} complete epoch(s): {type(error).__name__}: "
        f"{error} (the run's log: {config.application_log}). The result is on this error's "
        "`.result`; call errors_in_result() on the builder to have launch return it instead",
        result,
    ) from error


def _launch(config: TrainingConfig, learner: Learner[M]) -> LearningResult[M]:
    check_monitor(config, learner)
    check_metric_names(config)
    loggers = run_loggers(config)
    checkpointer = _checkpointer(config)
    if config.resume != "latest":
        resume = _resume_point(config, checkpointer)
    if config.compile_options is not None:
        learner.model.compile(**config.compile_options)
    check_tests(config, checkpointer)
    schedule = Schedule(
        config.num_epochs if config.max_steps is None or config.epochs_given else None,
        config.max_steps,
        config.validate_every,
        config.checkpoint_every,
    )
    metrics = _metrics(config)
    blocker = mid_round_blocker(checkpointer, metrics.metrics(Split.TRAIN))
    per_pass = steps_per_pass(config.train, config.grads_accumulation)
    check_schedule(schedule, config.valid, checkpointer is not None, blocker, per_pass)
    checkpointing = config.gradient_checkpointing
    if checkpointing is not None:
        checkpointing = checkpointed_modules(learner.model, checkpointing or None)
    strategy = config.strategy or SingleDevice()
    main = strategy.is_main  # False on DDP ranks > 0: no files, no output
    interrupter = config.interrupter
    renderer: MetricsRenderer = CliMetricsRenderer(io.StringIO())
    with experiment_log(config.application_log if main else None, attempt=True) as application_log:
        if main:
            renderer = config.renderer or default_renderer(interrupter)
        show = renderer.on_warning if main and isinstance(renderer, WarningRenderer) else None
        with warnings_to(show):  # skipped checkpoints: in experiment.log and on the screen
            if config.resume == "latest":
                resume = _resume_point(config, checkpointer)
                end = (  # a run that stopped inside a round is never a finished one
                    None
                    if resume is not None and resume.step is not None
                    else finished_run(
                        config, checkpointer, 1 if resume is None else resume.epoch + 1
                    )
                )
                if end is not None and checkpointer is not None:
                    renderer.close()
                    listing = _checkpoints(checkpointer)
                    return finished_result(config, learner, checkpointer, end, renderer, listing)
        begin_attempt(application_log, resume)  # its first line in experiment.log
        store = EventStore(loggers if main else [])
        if main:
            _start_loggers(config, learner, store)
        starting_epoch = 1 if resume is None else resume.starting_epoch
        async_processor = AsyncProcessorTraining(
            FullEventProcessorTraining(metrics, renderer, store),
            on_error=lambda error: interrupter.stop(f"metrics thread failed: {error!r}"),
        )
        processor: EventProcessor = async_processor if main else SilentProcessor()
        plan = LoopPlan(
            num_epochs=config.num_epochs,
            starting_epoch=starting_epoch,
            grads_accumulation=config.grads_accumulation,
            gradient_checkpointing=checkpointing,
            early_stopping=config.early_stopping,
            checkpointer=checkpointer,
            precision=config.precision,
            clipping=config.clipping,
            mean_accumulation=config.mean_accumulation,
            measure_grad_norm=any(isinstance(m, GradNormMetric) for _, m in config.metrics),
            hooks=(learner.model, *config.hooks)
            if isinstance(learner.model, TrainingHooks)
            else config.hooks,
            stateful=dict(config.stateful),
            validate=config.valid is not None,
            schedule=schedule,
            resume_step=None if resume is None else resume.step,
            train_metrics=metrics.metrics(Split.TRAIN),
            mid_round_blocker=blocker,
        )
        error: BaseException | None = None
        result = LoopResult(starting_epoch - 1)
        summary: LearnerSummary | None = None
        try:
            log.info(
                "Starting training for %d epochs at epoch %d", config.num_epochs, starting_epoch
            )
            if main and checkpointer is not None:
                clear_run_end(checkpointer.directory)  # this run trains: not finished
            if isinstance(strategy, PrecisionStrategy):  # e.g. FSDP's mixed-precision policy
                strategy.use_precision(config.precision)
            # train only: the strategy places the train loader in valid's place too (never
            # iterated: the loop skips validation), so every strategy runs unchanged
            valid = config.train if config.valid is None else config.valid
            run = strategy.start(learner, config.train, valid)
            async_processor.inline = _on_cpu(run)  # nothing to wait for: no thread hand-offs
            loop = TrainingLoop(
                plan,
                learner,
                run,
                main=main,
                processor=processor,
                store=store,
                interrupter=interrupter,
            )
            try:
                result = loop.execute()
            except BaseException as failure:
                result = LoopResult(loop.last_epoch)  # the epochs completed before it
                run.close(failure)
                raise
            run.close()
            async_processor.flush()
            if config.summary and async_processor.error is None and main:
                summary = _write_summary(config, learner, store, result)
            ended = result.complete and async_processor.error is None
            if main and checkpointer is not None and ended:
                end = RunEnd(
                    result.last_epoch, config.num_epochs, result.stop_reason, config.max_steps
                )
                end.write(checkpointer.directory)
        except Exception as caught:  # reported in the result, never lost
            error = caught
        finally:
            wanted = wanted_artifacts(loggers)
            where = checkpointer.directory if checkpointer is not None else None
            artifacts = (lambda: run_artifacts(config.directory, wanted, where)) if main else dict
            error = _finish(async_processor, store, checkpointer, summary, artifacts, error)
            renderer = async_processor.processor.renderer
    if application_log is not None and application_log.error is not None:
        error = _Outcome(error).add(application_log.error)
    learner.model.eval()
    learning = run_result(
        config,
        learner.model,
        renderer,
        error,
        summary,
        result.stop_reason,
        result.last_epoch,
        _checkpoints(checkpointer),
        store,
    )
    return _test(config, learning) if config.tests and error is None else learning


def _on_cpu(run: StrategyRun) -> bool:
    """Whether every replica's parameters and every loader are on the CPU: then no output
    needs a device read-back, and the metrics are processed on the training thread."""
    cpu = torch.device("cpu")
    return all(loader.device == cpu for loader in run.loaders.values()) and all(
        param.device == cpu for model in run.replicas for param in model.parameters()
    )


def _checkpoints(checkpointer: RunCheckpointer | None) -> tuple[dict[int, Path], int | None]:
    """The run's checkpointed model files by epoch, and its best epoch (ember's layout)."""
    if checkpointer is None:
        return {}, None
    try:
        return model_checkpoints(checkpointer.directory), best_epoch(checkpointer.directory)
    except CheckpointError as error:  # another layout, or nothing written
        log.debug("no checkpoint listing for the result: %s", error)
        return {}, None


def _test(config: TrainingConfig, result: LearningResult[M]) -> LearningResult[M]:
    """Evaluate the ``with_test`` tests after training; a failure is the result's error."""
    renderer = config.renderer if isinstance(config.renderer, EvaluationRenderer) else None
    metrics = [copy.deepcopy(metric) for split, metric in config.metrics if split is Split.VALID]
    try:
        evaluation = result.evaluate(
            config.tests,
            *metrics,
            checkpoint=config.test_checkpoint,
            renderer=renderer,
            summary=config.summary,
            precision=config.precision,
        )
    except Exception as error:  # reported in the result (the renderer has shown it)
        return dataclasses.replace(result, error=error)
    return dataclasses.replace(result, evaluation=evaluation)


def _metrics(config: TrainingConfig) -> MetricsTraining:
    metrics = MetricsTraining()
    for split, metric in config.metrics:
        metrics.register(split, metric)
    return metrics


def _checkpointer(config: TrainingConfig) -> RunCheckpointer | None:
    checkpointer = config.checkpointer
    if checkpointer == DEFAULT_CHECKPOINTERS:
        strategy = config.checkpointing_strategy or (
            default_checkpointing_strategy()
            if config.valid is not None
            else KeepLastNCheckpoints(2)  # train only: no valid Loss to keep the best of
        )
        return LearningCheckpointer(config.directory / "checkpoint", strategy)
    assert not isinstance(checkpointer, str)
    return checkpointer


def _resume_point(
    config: TrainingConfig, checkpointer: RunCheckpointer | None
) -> ResumePoint | None:
    """Where training resumes (None: afresh); checks a requested checkpoint exists before
    anything runs."""
    if config.resume is None:
        return None
    if checkpointer is None:
        raise ValueError(
            "resuming needs checkpointers: call with_default_checkpointers() (or "
            "with_checkpointers(...)) before checkpoint(epoch) / resume_latest()"
        )
    if config.resume == "latest":
        return resume_latest_point(checkpointer, fresh_if_unusable=config.fresh_if_unusable)
    if not manifest_path(checkpointer.directory, config.resume).exists():
        raise CheckpointError(
            f"no complete checkpoint of epoch {config.resume} in {checkpointer.directory}; "
            f"complete epochs: {checkpointer.complete_epochs()}"
        )
    return ResumePoint(config.resume)


def _write_summary(
    config: TrainingConfig, learner: Learner[Any], store: EventStore, result: LoopResult
) -> LearnerSummary:
    summary = LearnerSummary.collect(
        store,
        config.summary_metrics,
        result.last_epoch,
        model=describe_model(learner.model),
        stop_reason=result.stop_reason,
        units={m.name: m.attributes.unit for _, m in config.metrics if isinstance(m, Numeric)},
    )
    atomic_write(config.directory / "summary.json", summary.dumps().encode("utf-8"))
    return summary


def _finish(
    processor: AsyncProcessorTraining,
    store: EventStore,
    checkpointer: RunCheckpointer | None,
    summary: LearnerSummary | None,
    artifacts: Callable[[], dict[str, Path]],
    error: BaseException | None,
) -> BaseException | None:
    """End a run whatever happened: drain the metrics thread, finish the checkpoint writes, send
    ``End``, show the error, write the ``artifacts`` and give them to the loggers with the
    summary, close the logs and the renderer. Returns the run's first error.

    Each step runs whatever the steps before it did (a full disk, a renderer that raises): the
    first error is the run's, later ones are notes on it, and every thread is stopped.
    """
    outcome = _Outcome(error)
    outcome.run(processor.flush)
    outcome.add(processor.error)
    if outcome.error is not None:
        failure = outcome.error
        outcome.run(lambda: log.error("Training failed", exc_info=failure))
    if checkpointer is not None:
        outcome.run(checkpointer.close)  # a failed write is the run's error
    outcome.run(lambda: processor.process_train(End(summary)))
    outcome.run(processor.close)
    outcome.add(processor.error)  # the renderer's end() or on_train_end() failed
    renderer = processor.processor.renderer
    if outcome.error is not None:
        failure = outcome.error
        outcome.run(lambda: renderer.on_error(failure))
    files: dict[str, Path] = {}
    outcome.run(lambda: files.update(artifacts()))  # after the last checkpoint write
    outcome.run(lambda: store.end(summary, files))
    outcome.run(store.close)
    outcome.run(renderer.close)
    return outcome.error


class _Outcome:
    """A run's first error; errors met after it are added to it as notes, not lost."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    def add(self, error: BaseException | None) -> BaseException | None:
        """Keep ``error`` as the first one, or note it on the first; returns the first."""
        if error is None or error is self.error:
            return self.error
        if self.error is None:
            self.error = error
        else:
            self.error.add_note(
                f"ember: then, while finishing the run: {type(error).__name__}: {error}"
            )
        return self.error

    def run(self, step: Callable[[], object]) -> None:
        """Run one shutdown step; its exception is added, never raised."""
        try:
            step()
        except Exception as caught:  # every later step must still run
            self.add(caught)


def _start_loggers(config: TrainingConfig, learner: Learner[Any], store: EventStore) -> None:
    """Write ``config.json`` and start the loggers with it; on an error, close them and raise."""
    run_config = run_configuration(config, learner)
    try:
        text = json.dumps(run_config, indent=2, sort_keys=True) + "\n"
        # not flushed to disk: written again by every launch (a resume too), and two flushes
        # cost a short run several percent of its time (benchmarks/precision.py)
        atomic_write(config.directory / "config.json", text.encode("utf-8"), sync=False)
        store.start(run_config)
    except BaseException:
        store.close()
        raise
