"""Launching a configured run: what is set up around the loop, and how a run always ends.

::

    launch(config, learner):
        check the learner; find the starting epoch (a requested checkpoint must exist)
        the loggers: the file logs and the given ones (refused if nothing reads back what the
            summary, early stopping or checkpointing need)
        main process: make the run directory; experiment.log; the renderer; config.json;
            every logger's start(config) (an error there stops the launch, before training)
        resume_latest(): the newest usable checkpoint, skipped ones warned of in experiment.log
                         (none usable of several: CheckpointError, unless fresh_if_unusable)
        other processes: no files, no output (their events are dropped)
        start train-worker (the metrics thread)
        with Ctrl-C / SIGTERM routed to the interrupter:
            TrainingLoop(...).execute()                  # _loop.py: the epochs
        flush; summary.json and the table (main process, no error)
        finish, whatever happened (each step runs even if one before it failed):
            drain train-worker; log the error; finish the checkpoint writes; End(summary);
            stop train-worker; renderer.on_error(error); the loggers' end(summary, artifacts);
            close the loggers and the renderer
        result = LearningResult(model in eval mode, renderer, error, summary, stop reason,
                                the checkpoints and the best epoch)
        with_test tests, if training succeeded: result.evaluate(tests, the valid metrics,
                                                                the test checkpoint)

``launch`` never raises for an error during training: it is ``LearningResult.error``, with its
traceback, after everything above is done. Each finishing step is guarded: the first error is
the run's, any later one (a full disk under ``experiment.log``, a renderer whose ``on_error``
raises) a note on it. What ``launch`` raises is refused before training starts: a bad
learner, a missing checkpoint, or ``resume_latest()`` finding only unusable checkpoints.
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

from torch import nn

from ember._errors import CheckpointError
from ember.train._application_log import experiment_log, warnings_to
from ember.train._checkpoint.export import best_epoch, model_checkpoints
from ember.train._checkpoint.file import atomic_write
from ember.train._checkpoint.learning import LearningCheckpointer, RunCheckpointer
from ember.train._checkpoint.manifest import manifest_path
from ember.train._checkpoint.resume import resume_latest_epoch
from ember.train._checkpoint.strategy import (
    ComposedCheckpointingStrategy,
    MetricCheckpointingStrategy,
    default_checkpointing_strategy,
)
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._early_stopping import MetricEarlyStoppingStrategy
from ember.train._events import End
from ember.train._gradient_checkpointing import checkpointed_modules
from ember.train._hooks import TrainingHooks
from ember.train._learner import Learner
from ember.train._logger.run import run_artifacts, run_loggers
from ember.train._loop import LoopPlan, LoopResult, TrainingLoop
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
from ember.train._schedule import Schedule, check_schedule
from ember.train._signals import graceful_stop
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
    _check_monitor(config, learner)
    _check_metric_names(config)
    loggers = run_loggers(config)
    checkpointer = _checkpointer(config)
    if config.resume != "latest":
        starting_epoch = _starting_epoch(config, checkpointer)
    if config.compile_options is not None:
        learner.model.compile(**config.compile_options)
    _check_tests(config, checkpointer)
    schedule = Schedule(
        config.num_epochs if config.max_steps is None or config.epochs_given else None,
        config.max_steps,
        config.validate_every,
        config.checkpoint_every,
    )
    check_schedule(schedule, config.valid.num_items(), checkpointer is not None)
    checkpointing = config.gradient_checkpointing
    if checkpointing is not None:
        checkpointing = checkpointed_modules(learner.model, checkpointing or None)
    strategy = config.strategy or SingleDevice()
    main = strategy.is_main  # False on DDP ranks > 0: no files, no output
    if main:
        config.directory.mkdir(parents=True, exist_ok=True)
    interrupter = config.interrupter
    renderer: MetricsRenderer = CliMetricsRenderer(io.StringIO())
    with experiment_log(config.application_log if main else None) as application_log:
        if main:
            renderer = config.renderer or default_renderer(interrupter)
        show = renderer.on_warning if main and isinstance(renderer, WarningRenderer) else None
        with warnings_to(show):  # skipped checkpoints: in experiment.log and on the screen
            if config.resume == "latest":
                starting_epoch = _starting_epoch(config, checkpointer)
        store = EventStore(loggers if main else [])
        if main:
            _start_loggers(config, learner, store)
        async_processor = AsyncProcessorTraining(
            FullEventProcessorTraining(_metrics(config), renderer, store),
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
            schedule=schedule,
        )
        error: BaseException | None = None
        result = LoopResult(starting_epoch - 1)
        summary: LearnerSummary | None = None
        try:
            log.info(
                "Starting training for %d epochs at epoch %d", config.num_epochs, starting_epoch
            )
            run = strategy.start(learner, config.train, config.valid)
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
                with graceful_stop(interrupter):
                    result = loop.execute()
            except BaseException as failure:
                run.close(failure)
                raise
            run.close()
            async_processor.flush()
            if config.summary and async_processor.error is None and main:
                summary = _write_summary(config, learner, store, result)
        except Exception as caught:  # reported in the result, never lost
            error = caught
        finally:
            artifacts = run_artifacts(config.directory) if main else {}
            error = _finish(async_processor, store, checkpointer, summary, artifacts, error)
            renderer = async_processor.processor.renderer
    if application_log is not None and application_log.error is not None:
        error = _Outcome(error).add(application_log.error)
    learner.model.eval()
    checkpoints, best = _checkpoints(checkpointer)
    learning = LearningResult(
        learner.model,
        renderer,
        error,
        summary,
        result.stop_reason,
        result.last_epoch,
        directory=config.directory,
        best_epoch=best,
        checkpoints=checkpoints,
        strategy=config.strategy,
    )
    return _test(config, learning) if config.tests and error is None else learning


def _check_tests(config: TrainingConfig, checkpointer: RunCheckpointer | None) -> None:
    """``with_test`` needs the valid split's metrics, and checkpoints to take weights from."""
    if not config.tests:
        return
    if not any(split is Split.VALID for split, _ in config.metrics):
        raise ValueError(
            "with_test evaluates with the valid split's metrics, and none is registered: "
            "add one (e.g. metric_valid_numeric(LossMetric()) or metrics(...))"
        )
    if config.test_checkpoint is not None and checkpointer is None:
        raise ValueError(
            f"with_test(checkpoint={config.test_checkpoint!r}) takes the weights from a "
            "checkpoint: call with_default_checkpointers(), or pass checkpoint=None to "
            "evaluate the model as trained"
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


def _check_monitor(config: TrainingConfig, learner: Learner[Any]) -> None:
    """A metric-driven scheduler's metric must be registered on the validation split."""
    monitor = learner.monitor
    valid = sorted(m.name for split, m in config.metrics if split is Split.VALID)
    if monitor is not None and monitor not in valid:
        raise ValueError(
            f"the scheduler is stepped with the validation metric {monitor!r}, which is not "
            f"registered on the valid split (registered: {valid}); register it with "
            f"metric_valid_numeric(...)"
        )


def _check_metric_names(config: TrainingConfig) -> None:
    """The metrics early stopping and a given checkpointing strategy read must be registered
    on their split: a typo would otherwise only warn, epoch after epoch, and never act."""
    wanted: list[tuple[str, str, Split]] = []
    if isinstance(config.early_stopping, MetricEarlyStoppingStrategy):
        stopping = config.early_stopping
        wanted.append(("early stopping", stopping.name, stopping.split))
    strategies: list[Any] = []
    if config.checkpointing_strategy is not None:
        strategies.append(config.checkpointing_strategy)
    if isinstance(config.checkpointer, LearningCheckpointer):
        strategies.append(config.checkpointer.strategy)
    while strategies:
        strategy = strategies.pop()
        if isinstance(strategy, ComposedCheckpointingStrategy):
            strategies.extend(strategy.strategies)
        elif isinstance(strategy, MetricCheckpointingStrategy):
            wanted.append(("the checkpointing strategy", strategy.name, strategy.split))
    for who, name, split in wanted:
        registered = sorted(m.name for s, m in config.metrics if s is split)
        if name not in registered:
            raise ValueError(
                f"{who} reads the metric {name!r} on the {split.value} split, which is not "
                f"registered there (registered: {registered}); register it (metric_"
                f"{split.value}_numeric(...) or metrics(...)) or fix the name"
            )


def _metrics(config: TrainingConfig) -> MetricsTraining:
    metrics = MetricsTraining()
    for split, metric in config.metrics:
        metrics.register(split, metric)
    return metrics


def _checkpointer(config: TrainingConfig) -> RunCheckpointer | None:
    checkpointer = config.checkpointer
    if checkpointer == DEFAULT_CHECKPOINTERS:
        strategy = config.checkpointing_strategy or default_checkpointing_strategy()
        return LearningCheckpointer(config.directory / "checkpoint", strategy)
    assert not isinstance(checkpointer, str)
    return checkpointer


def _starting_epoch(config: TrainingConfig, checkpointer: RunCheckpointer | None) -> int:
    """The first epoch to train; checks a requested checkpoint exists before anything runs."""
    if config.resume is None:
        return 1
    if checkpointer is None:
        raise ValueError(
            "resuming needs checkpointers: call with_default_checkpointers() (or "
            "with_checkpointers(...)) before checkpoint(epoch) / resume_latest()"
        )
    if config.resume == "latest":
        return resume_latest_epoch(checkpointer, fresh_if_unusable=config.fresh_if_unusable)
    if not manifest_path(checkpointer.directory, config.resume).exists():
        raise CheckpointError(
            f"no complete checkpoint of epoch {config.resume} in {checkpointer.directory}; "
            f"complete epochs: {checkpointer.complete_epochs()}"
        )
    return config.resume + 1


def _write_summary(
    config: TrainingConfig, learner: Learner[Any], store: EventStore, result: LoopResult
) -> LearnerSummary:
    summary = LearnerSummary.collect(
        store,
        config.summary_metrics,
        result.last_epoch,
        model=describe_model(learner.model),
        stop_reason=result.stop_reason,
    )
    atomic_write(config.directory / "summary.json", summary.dumps().encode("utf-8"))
    return summary


def _finish(
    processor: AsyncProcessorTraining,
    store: EventStore,
    checkpointer: RunCheckpointer | None,
    summary: LearnerSummary | None,
    artifacts: dict[str, Path],
    error: BaseException | None,
) -> BaseException | None:
    """End a run whatever happened: drain the metrics thread, finish the checkpoint writes, send
    ``End``, show the error, give the loggers the summary and ``artifacts``, close the logs and
    the renderer. Returns the run's first error.

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
    outcome.run(lambda: store.end(summary, artifacts))
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
        atomic_write(config.directory / "config.json", text.encode("utf-8"))
        store.start(run_config)
    except BaseException:
        store.close()
        raise
