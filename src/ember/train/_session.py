"""A run's session: the resources a run holds while it trains, and how it always ends. Where
training starts is found in ``_start.py``, the result built in ``_facts.py``, the ``with_test``
tests run in ``_test_sets.py``; the session calls them in order.

::

    with TrainingSession(plan, learner) as session:      # entering, in order:
        main process: the run directory chosen and claimed (its lock; versioned(): a new
            version; a fresh run into another run's directory goes to a free sibling, is
            refused, or that run's files are removed with overwrite(): _directory.py); the plan
            moved there (_plan.moved)
        checkpoint(epoch): that checkpoint must verify, read once (refused before anything is
            written: _start.py)
        compile(...): the model compiled in place
        main process: experiment.log; the renderer; the run directory said in both
        resume_latest(): the newest usable checkpoint, or none, or a run complete already for
            what is asked, whose result is the session's without training (_start.py,
            _finished.py)
        main process: config.json (and ember.cli's config.yaml), every logger's start(config)
            (an error there ends the launch, before training); the metrics thread (train-worker)
        other processes: no files, no output (their events are dropped)

        with session.placed() as (run, counters):        # the strategy places the model and the
                                                         # loaders; the optimizers are built on
                                                         # the placed parameters
            session.ended(loop.execute())                # the loop (_loop.py), then: flush;
                                                         # summary.json and the table; the run's
                                                         # end recorded (run-end.json);
                                                         # the checkpoint writes finished, and
                                                         # every process takes the main one's
                                                         # summary, checkpoints and best epoch
                                                         # (_facts.py)
    leaving, whatever happened (each step runs even if one before it failed):
        drain train-worker; after an error the callbacks' on_error(error); log the error (then
        a note on it: where its traceback is, which the renderer's line and Python's traceback
        show); finish the checkpoint writes; End(summary); stop train-worker;
        renderer.on_error(error); the artifacts the loggers asked for (the best checkpoint
        exported, the curves drawn); after an error the loggers' on_error(error) (a tracker
        marks the run failed); the loggers' end(summary, artifacts); close the loggers, the
        renderer and experiment.log
        session.result = LearningResult(model in eval mode, renderer, error, summary, stop
            reason, the checkpoints and the best epoch: _facts.py); the with_test tests, if
            training succeeded (_test_sets.py)
        release the run directory

An exception inside the session is the run's error (kept in the result, with its traceback);
later ones while finishing are notes on it. Only an abort (``KeyboardInterrupt`` at a second
signal, ``SystemExit``) goes through, after the same ending.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType
from typing import Generic, TypeVar

import torch
from torch import nn

from ember._protocols import member
from ember._rundir.config import write_config
from ember._rundir.end import RunEnd
from ember.train._application_log import (
    ExperimentLogHandler,
    begin_attempt,
    experiment_log,
    warnings_to,
)
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._config import run_configuration
from ember.train._counters import RunCounters
from ember.train._directory import claim_for_run
from ember.train._events import End
from ember.train._experiment import write_experiment_config
from ember.train._facts import (
    Listing,
    agreed_facts,
    checkpoint_listing,
    complete_rounds,
    run_result,
    summary_written,
)
from ember.train._finished import finished_result
from ember.train._learner import Learner
from ember.train._logger.store import EventStore
from ember.train._loop import LoopOutcome
from ember.train._lr_scheduler.torch_adapter import interval_notice
from ember.train._plan import RunPlan, moved
from ember.train._processor import (
    AsyncProcessorTraining,
    EventProcessor,
    FullEventProcessorTraining,
    SilentProcessor,
)
from ember.train._renderer.base import MetricsRenderer, Renderer
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._renderer.default import default_renderer
from ember.train._result import LearningResult
from ember.train._start import checkpointer_for, latest_start, requested_start
from ember.train._strategy.base import StrategyDefaults, StrategyRun
from ember.train._summary import LearnerSummary
from ember.train._test_sets import tested
from ember.train._tracking import run_artifacts, wanted_artifacts
from ember.train._valid_sets import loader_key

__all__ = ["TrainingSession"]

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("ember.train")

_TOLD: set[str] = set()
"""The notices this process has shown (each once: :meth:`TrainingSession._tell`)."""


class TrainingSession(Generic[M]):
    """The resources of one run of ``plan`` with ``learner`` and its guaranteed ending (see the
    module doc); after the ``with`` block, :attr:`result` is the run's result."""

    def __init__(self, plan: RunPlan, learner: Learner[M]) -> None:
        self.plan, self.learner = plan, learner
        self.start: ResumePoint | None = None
        """The checkpoint training starts from (None: afresh)."""
        self.finished: LearningResult[M] | None = None
        """A run complete already: its result, returned without training."""
        self.result: LearningResult[M] | None = None
        self.counters = RunCounters()
        self.renderer: MetricsRenderer = CliMetricsRenderer(io.StringIO())  # silent elsewhere
        self.store = EventStore([])
        self.processor: EventProcessor = SilentProcessor()
        self._worker: AsyncProcessorTraining | None = None
        self._outcome = LoopOutcome(0)
        self._summary: LearnerSummary | None = None
        self._run: StrategyRun | None = None
        self._listing: Listing | None = None  # rank 0's, agreed
        self._checkpoints_closed = False  # by ended(), once training ended without an error
        self._error = _FirstError()
        self._claim = ExitStack()
        self._log = ExitStack()
        self._application_log: ExperimentLogHandler | None = None

    # --- entering ------------------------------------------------------------------------------

    def __enter__(self) -> TrainingSession[M]:
        try:
            self._open()
        except BaseException:  # refused before training: nothing was started to finish
            self.renderer.close()
            self._log.close()
            self._claim.close()
            raise
        return self

    def _open(self) -> None:
        asked = self.plan.config.directory
        if self.plan.config.keeps_files:  # fast_dev_run: not even the lock
            claimed = self._claim.enter_context(claim_for_run(self.plan.config))
            self.plan = moved(self.plan, claimed)  # a version, or a free sibling of asked
        plan = self.plan
        config, main = plan.config, plan.main
        if config.resume is not None and config.resume != "latest":
            self.start = requested_start(plan.checkpointer, config.resume)
        if config.compile_options is not None:
            self.learner.model.compile(**config.compile_options)
        self._application_log = self._log.enter_context(
            experiment_log(config.application_log if main else None, attempt=True)
        )
        if main:
            self.renderer = config.renderer or default_renderer(config.interrupter)
            self._announce(asked)
        if config.resume == "latest":
            self._find_latest()
            if self.finished is not None:
                return
        begin_attempt(self._application_log, self.start)  # its first line in experiment.log
        self._start_logs()

    def _announce(self, asked: Path) -> None:
        """Say which directory the run writes, in ``experiment.log`` and through the renderer
        (a ``versioned()`` run's version, or a free sibling of ``asked``, which holds an earlier
        run, are found there and in ``LearningResult.directory``)."""
        config = self.plan.config
        moved_from = config.directory != asked and not config.versioned
        log.info(
            "Run directory: %s%s",
            config.directory,
            f" ({asked} holds an earlier run, left as it is)" if moved_from else "",
        )
        member(self.renderer, Renderer, "on_run_directory")(config.directory)

    def _find_latest(self) -> None:
        """``resume_latest()``: the newest usable checkpoint, or a finished run's result; its
        warnings reach the screen too."""
        plan, renderer = self.plan, self.renderer
        show = member(renderer, Renderer, "on_warning") if plan.main else None
        self.start, end = latest_start(plan.config, plan.checkpointer, show)
        if self.start is not None and end is not None:
            renderer.close()
            checkpointer = checkpointer_for(plan.checkpointer, "resume_latest()")
            listing = checkpoint_listing(checkpointer)
            self.finished = finished_result(
                plan.config, self.learner, checkpointer, self.start, end, renderer, listing
            )

    def _start_logs(self) -> None:
        """The loggers started with the run's configuration; the metrics thread."""
        plan, config = self.plan, self.plan.config
        self.store = EventStore(list(plan.loggers) if plan.main else [])
        if plan.main:
            self._start_loggers()
        self._worker = AsyncProcessorTraining(
            FullEventProcessorTraining(plan.metrics, self.renderer, self.store),
            on_error=lambda error: config.interrupter.stop(f"metrics thread failed: {error!r}"),
        )
        if plan.main:
            self.processor = self._worker
        starting = 1 if self.start is None else self.start.starting_epoch
        self.counters = RunCounters.starting(starting)

    def _start_loggers(self) -> None:
        """Write ``config.json`` and start the loggers with it; on an error, close them and
        raise."""
        config = self.plan.config
        described = run_configuration(config, self.learner)
        try:
            if config.keeps_files:
                write_config(config.directory, described)
                write_experiment_config(config.directory)  # ember.cli's config.yaml
            self.store.start(described)
        except BaseException:
            self.store.close()
            raise

    # --- training ------------------------------------------------------------------------------

    @contextmanager
    def placed(self) -> Iterator[StrategyRun]:
        """The strategy's run: the model and the loaders placed, the optimizers built on the
        placed parameters; closed after the block (with the error that ended it, if any)."""
        plan, config = self.plan, self.plan.config
        log.info("Starting training for %s", _duration(plan, self.counters.last_round + 1))
        notice = interval_notice(self.learner.lr_scheduler)
        if notice is not None and plan.main:
            self._tell(notice)
        use_precision = member(plan.strategy, StrategyDefaults, "use_precision")
        use_precision(config.precision)  # e.g. FSDP's mixed-precision policy
        loaders = {"train": config.train_loader}
        if config.valid is not None:
            loaders["valid"] = config.valid
        for name, loader in config.valid_sets:  # another validation set: valid:{name}
            loaders[loader_key(name)] = loader
        run = self._run = plan.strategy.start(self.learner.model, loaders)
        try:
            self.learner.bind()  # the optimizers, on the placed parameters
            if self._worker is not None:
                self._worker.inline = _on_cpu(run)  # nothing to wait for: no thread hand-offs
            yield run
        except BaseException as failure:
            run.close(failure)
            raise
        run.close()

    def _tell(self, notice: str) -> None:
        """A notice on the screen and in ``experiment.log`` the first time this process says
        it; later runs only write it to their ``experiment.log`` (a notebook or a sweep runs
        the same script again and again)."""
        if notice in _TOLD:
            log.info(notice)
            return
        _TOLD.add(notice)
        with warnings_to(member(self.renderer, Renderer, "on_warning")):
            log.warning(notice)

    def ended(self, outcome: LoopOutcome) -> None:
        """Training ended without an error: flush; the summary; the run's end recorded in its
        directory when it is complete."""
        self._outcome = outcome
        plan, config = self.plan, self.plan.config
        worker = self._worker
        assert worker is not None
        worker.flush()
        if config.summary and worker.error is None and plan.main:
            self._summary = summary_written(
                config, self.learner, self.store, outcome.last_round, outcome.stop_reason
            )
        if plan.writes_files and outcome.complete and worker.error is None:
            end = RunEnd(
                outcome.last_round, config.num_epochs, outcome.stop_reason, config.max_steps
            )
            end.write(config.directory)  # with checkpoints or without (ember.runs reads it)
        self._agree_on_facts()

    def _agree_on_facts(self) -> None:
        """Every rank's result holds rank 0's facts (``_facts.py``), listed once the checkpoint
        writes are done (a failed write is the run's error)."""
        plan, run = self.plan, self._run
        assert run is not None  # ended() is called inside placed()
        if plan.checkpointer is not None:
            self._checkpoints_closed = True
            self._error.run(plan.checkpointer.close)
        self._listing, self._summary = agreed_facts(
            run, plan.main, plan.checkpointer, self._summary
        )

    # --- leaving -------------------------------------------------------------------------------

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        caught = isinstance(error, Exception)
        if caught:
            self._error.add(error)
        try:
            if self.finished is None:
                self._finish()
            self._log.close()  # experiment.log: flushed and closed
            if self._application_log is not None:
                self._error.add(self._application_log.error)
            self.result = self.finished or self._result()
        finally:
            self._claim.close()  # the run directory released
        return caught

    def _finish(self) -> None:
        """End a run whatever happened (see the module doc): each step runs whatever the steps
        before it did (a full disk, a renderer that raises); the first error is the run's."""
        outcome, worker, plan = self._error, self._worker, self.plan
        assert worker is not None  # started by __enter__ (or the run had finished before)
        outcome.run(worker.flush)
        outcome.add(worker.error)
        if outcome.error is not None:
            failure = outcome.error
            outcome.run(lambda: plan.callbacks.call("on_error", failure))
            outcome.run(lambda: log.error("Training failed", exc_info=failure))
            where = plan.config.application_log
            if plan.main and where is not None:  # shown by the renderer and with the traceback
                failure.add_note(f"ember: the traceback is in {where}")
        if plan.checkpointer is not None and not self._checkpoints_closed:
            outcome.run(plan.checkpointer.close)  # a failed write is the run's error
        outcome.run(lambda: worker.process_train(End(self._summary)))
        outcome.run(worker.close)
        outcome.add(worker.error)  # the renderer's end() or on_train_end() failed
        renderer = worker.processor.renderer
        if outcome.error is not None:
            failure = outcome.error
            outcome.run(lambda: renderer.on_error(failure))
        files: dict[str, Path] = {}
        if plan.main:
            outcome.run(lambda: files.update(self._artifacts()))  # after the last write
        if outcome.error is not None:  # a tracker marks the run failed, not finished
            failed = outcome.error
            outcome.run(lambda: self.store.on_error(failed))
        outcome.run(lambda: self.store.end(self._summary, files))
        outcome.run(self.store.close)
        outcome.run(renderer.close)
        self.renderer = renderer

    def _artifacts(self) -> dict[str, Path]:
        checkpointer = self.plan.checkpointer
        where = checkpointer.directory if checkpointer is not None else None
        return run_artifacts(self.plan.config.directory, wanted_artifacts(self.plan.loggers), where)

    def _result(self) -> LearningResult[M]:
        """The run's result (``_facts.py``; the model in eval mode), tested (``with_test``:
        ``_test_sets.py``) when training succeeded."""
        config, error = self.plan.config, self._error.error
        self.learner.model.eval()
        listing = self._listing
        result = run_result(
            config,
            self.learner,
            self.renderer,
            error,
            self._summary,
            self._outcome.stop_reason,
            complete_rounds(self.counters.last_round, self._worker),
            listing if listing is not None else checkpoint_listing(self.plan.checkpointer),
            self.store,
        )
        return tested(config, result) if config.tests and error is None else result


def _duration(plan: RunPlan, starting: int) -> str:
    """How long the run trains and where it starts, for ``experiment.log``: in epochs, or in
    steps and rounds when ``max_steps`` bounds it (``_schedule.py``)."""
    schedule = plan.schedule
    epochs = schedule.max_epochs
    if schedule.max_steps is None:
        return f"{epochs} epoch{'s' * (epochs != 1)} at epoch {starting}"
    steps = schedule.max_steps
    bound = f"{steps} step{'s' * (steps != 1)}"
    if epochs is not None:
        bound += f" or {epochs} epoch{'s' * (epochs != 1)}, whichever ends first"
    size, unit = int(schedule.validate.value), schedule.validate.unit  # a round's span
    return f"{bound} in rounds of {size} {unit[:-1] if size == 1 else unit}, at round {starting}"


def _on_cpu(run: StrategyRun) -> bool:
    """Whether every replica's parameters and every loader are on the CPU: then no output
    needs a device read-back, and the metrics are processed on the training thread."""
    cpu = torch.device("cpu")
    return all(loader.device == cpu for loader in run.loaders.values()) and all(
        param.device == cpu for model in run.replicas for param in model.parameters()
    )


class _FirstError:
    """A run's first error; errors met after it are added to it as notes, not lost."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    def add(self, error: BaseException | None) -> None:
        """Keep ``error`` as the first one, or note it on the first."""
        if error is None or error is self.error:
            return
        if self.error is None:
            self.error = error
        else:
            self.error.add_note(
                f"ember: then, while finishing the run: {type(error).__name__}: {error}"
            )

    def run(self, step: Callable[[], object]) -> None:
        """Run one finishing step; its exception is added, never raised."""
        try:
            step()
        except Exception as caught:  # every later step must still run
            self.add(caught)
