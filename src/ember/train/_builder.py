"""``SupervisedTraining``: the builder that configures a run and launches it.

::

    result = (SupervisedTraining("artifacts/run", train_loader, valid_loader)
              .metric_train_numeric(LossMetric()).metric_valid_numeric(LossMetric())
              .num_epochs(3).summary()
              .launch(Learner(model, optimizer, 1e-2)))

Every builder method validates its argument at the call and returns the builder.
"""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from ember._errors import CheckpointError
from ember.data import DataLoader
from ember.train._application_log import experiment_log
from ember.train._checkpoint.file import atomic_write
from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.manifest import manifest_path
from ember.train._checkpoint.strategy import CheckpointingStrategy, default_checkpointing_strategy
from ember.train._checkpoint.training import TrainingCheckpointer
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._events import End, Start
from ember.train._gradient_checkpointing import check_module_names, checkpointed_modules
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._logger.base import MetricLogger
from ember.train._logger.file import FileMetricLogger
from ember.train._metric.base import Metric, Numeric
from ember.train._metric.store import EventStore
from ember.train._processor import (
    AsyncProcessorTraining,
    FullEventProcessorTraining,
    MetricsTraining,
)
from ember.train._renderer.base import MetricsRenderer
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._renderer.default import default_renderer
from ember.train._result import LearningResult
from ember.train._signals import graceful_stop
from ember.train._strategy.base import FitResult, SupervisedLearningStrategy, TrainingComponents
from ember.train._strategy.single import SingleDevice
from ember.train._summary import LearnerSummary, describe_model
from ember.train._vocabulary import Split

__all__ = ["SupervisedTraining"]

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("ember.train")


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
    return value


class SupervisedTraining:
    """Configures a supervised training run over ``train`` and ``valid`` in ``directory``.

    Defaults (Burn's): 1 epoch; ``directory/experiment.log`` application log; metrics logged to
    files under ``directory`` unless a metric logger is given; the renderer picked by
    :func:`~ember.train._renderer.default_renderer`; the device of the model's first parameter.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        train: DataLoader[Any],
        valid: DataLoader[Any],
    ) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"directory is a file, not a directory: {str(self.directory)!r}")
        for name, loader in (("train", train), ("valid", valid)):
            if not callable(getattr(loader, "to_device", None)) or not hasattr(loader, "__iter__"):
                raise TypeError(f"{name} must be an ember DataLoader, got {type(loader).__name__}")
        self._train = train
        self._valid = valid
        self._metrics = MetricsTraining()
        self._summary_metrics: set[str] = set()
        self._num_epochs = 1
        self._grads_accumulation: int | None = None
        self._gradient_checkpointing: tuple[str, ...] | None = None  # () = the direct children
        self._renderer: MetricsRenderer | None = None
        self._summary = False
        self._loggers: list[MetricLogger] = []
        self._application_log: Path | None = self.directory / "experiment.log"
        self._strategy: SupervisedLearningStrategy | None = None
        self._interrupter = Interrupter()
        self._early_stopping: EarlyStoppingStrategy | None = None
        self._checkpointer: LearningCheckpointer | None = None
        self._checkpointing_strategy: CheckpointingStrategy | None = None
        self._resume: int | None = None
        self._resume_latest = False

    # metrics -----------------------------------------------------------------------------

    def metric_train(self, metric: Metric) -> SupervisedTraining:
        """Compute ``metric`` on the training split (logged, not summarised)."""
        self._metrics.register(Split.TRAIN, metric)
        return self

    def metric_valid(self, metric: Metric) -> SupervisedTraining:
        """Compute ``metric`` on the validation split (logged, not summarised)."""
        self._metrics.register(Split.VALID, metric)
        return self

    def metric_train_numeric(self, metric: Numeric) -> SupervisedTraining:
        """Compute a numeric ``metric`` on the training split; it appears in the summary."""
        self._metrics.register(Split.TRAIN, _numeric(metric))
        self._summary_metrics.add(metric.name)
        return self

    def metric_valid_numeric(self, metric: Numeric) -> SupervisedTraining:
        """Compute a numeric ``metric`` on the validation split; it appears in the summary."""
        self._metrics.register(Split.VALID, _numeric(metric))
        self._summary_metrics.add(metric.name)
        return self

    def metrics(self, *metrics: Numeric) -> SupervisedTraining:
        """Compute each numeric metric on both splits."""
        for metric in metrics:
            self.metric_train_numeric(metric)
            self.metric_valid_numeric(metric)
        return self

    # loop --------------------------------------------------------------------------------

    def num_epochs(self, num_epochs: int) -> SupervisedTraining:
        """Train until epoch ``num_epochs`` (absolute, also when resuming)."""
        self._num_epochs = _positive_int("num_epochs", num_epochs)
        return self

    def grads_accumulation(self, n: int) -> SupervisedTraining:
        """Sum gradients over ``n`` batches per optimizer step (like an n times larger batch
        with an n times larger lr, since gradients are summed, not averaged)."""
        self._grads_accumulation = _positive_int("grads_accumulation", n)
        return self

    def gradient_checkpointing(self, modules: Sequence[str] | None = None) -> SupervisedTraining:
        """Recompute activations in the backward pass instead of keeping them (less memory,
        one more forward per step): those of the model's direct children, or of the submodules
        named by dotted name (checked against the model at launch). See
        ``ember.train._gradient_checkpointing``."""
        self._gradient_checkpointing = () if modules is None else check_module_names(modules)
        return self

    def with_training_strategy(self, strategy: SupervisedLearningStrategy) -> SupervisedTraining:
        """Run the epochs with ``strategy`` (default: :class:`SingleDevice`)."""
        if not callable(getattr(strategy, "fit", None)):
            raise TypeError(f"strategy must have a fit(...) method, got {type(strategy).__name__}")
        self._strategy = strategy
        return self

    def early_stopping(self, strategy: EarlyStoppingStrategy) -> SupervisedTraining:
        """Ask ``strategy`` after every epoch whether to stop."""
        if not callable(getattr(strategy, "should_stop", None)):
            raise TypeError(
                f"early stopping needs a should_stop(epoch, query) method, got "
                f"{type(strategy).__name__}"
            )
        self._early_stopping = strategy
        return self

    def with_interrupter(self, interrupter: Interrupter) -> SupervisedTraining:
        """Use ``interrupter`` to stop training from elsewhere."""
        if not isinstance(interrupter, Interrupter):
            raise TypeError(f"expected an Interrupter, got {type(interrupter).__name__}")
        self._interrupter = interrupter
        return self

    def interrupter(self) -> Interrupter:
        """The handle that stops this run (``stop(reason)``)."""
        return self._interrupter

    # checkpoints -------------------------------------------------------------------------

    def with_default_checkpointers(self) -> SupervisedTraining:
        """Checkpoint into ``directory/checkpoint`` (model, optim, scheduler and ember's state
        as safetensors, plus a manifest), written on a background thread."""
        return self.with_checkpointers(
            LearningCheckpointer(self.directory / "checkpoint", self._strategy_or_default())
        )

    def with_checkpointers(self, checkpointer: LearningCheckpointer) -> SupervisedTraining:
        """Checkpoint through ``checkpointer`` (its own directory, strategy and sync mode)."""
        if not isinstance(checkpointer, LearningCheckpointer):
            raise TypeError(f"expected a LearningCheckpointer, got {type(checkpointer).__name__}")
        if self._checkpointer is not None and self._checkpointer is not checkpointer:
            self._checkpointer.close()
        self._checkpointer = checkpointer
        return self

    def with_checkpointing_strategy(self, strategy: CheckpointingStrategy) -> SupervisedTraining:
        """Decide with ``strategy`` which epochs are kept (default: the last 2 and the best
        mean valid Loss)."""
        if not callable(getattr(strategy, "checkpointing", None)):
            raise TypeError(f"expected a CheckpointingStrategy, got {type(strategy).__name__}")
        self._checkpointing_strategy = strategy
        if self._checkpointer is not None:
            directory = self._checkpointer.directory
            self._checkpointer.close()
            self._checkpointer = LearningCheckpointer(directory, strategy)
        return self

    def checkpoint(self, epoch: int) -> SupervisedTraining:
        """Resume from the checkpoint of ``epoch``: training starts at ``epoch + 1``."""
        self._resume = _positive_int("epoch", epoch)
        self._resume_latest = False
        return self

    def resume_latest(self) -> SupervisedTraining:
        """Resume from the newest complete checkpoint, or start afresh if there is none."""
        self._resume = None
        self._resume_latest = True
        return self

    def _strategy_or_default(self) -> CheckpointingStrategy:
        if self._checkpointing_strategy is None:
            self._checkpointing_strategy = default_checkpointing_strategy()
        return self._checkpointing_strategy

    # output ------------------------------------------------------------------------------

    def renderer(self, renderer: MetricsRenderer) -> SupervisedTraining:
        """Show training with ``renderer``."""
        missing = [
            name
            for name in ("start", "start_split", "update_split", "update_train", "end")
            if not callable(getattr(renderer, name, None))
        ]
        if missing:
            raise TypeError(
                f"renderer {type(renderer).__name__} lacks {', '.join(missing)}: see "
                "ember.train.MetricsRenderer"
            )
        self._renderer = renderer
        return self

    def summary(self) -> SupervisedTraining:
        """Print the summary table at the end and write ``summary.json``."""
        self._summary = True
        return self

    def with_metric_logger(self, logger: MetricLogger) -> SupervisedTraining:
        """Log metrics to ``logger`` (once one is given, no file logger is added)."""
        if not callable(getattr(logger, "read_numeric", None)):
            raise TypeError(f"expected a MetricLogger, got {type(logger).__name__}")
        self._loggers.append(logger)
        return self

    def with_application_logger(self, path: str | os.PathLike[str] | None) -> SupervisedTraining:
        """Write the application log to ``path``, or nowhere with None."""
        self._application_log = None if path is None else Path(path)
        return self

    # launch ------------------------------------------------------------------------------

    def launch(self, learner: Learner[M]) -> LearningResult[M]:
        """Train ``learner``; never raises for errors during training (see ``result.error``).

        ::

            install experiment.log; resolve renderer and loggers; start train-worker
            Start(num_epochs, starting_epoch)
            strategy.fit(...)            # epochs: train split, valid split, EndEpoch,
                                         # then early stopping; stops on interrupt
            flush; summary (from the logged values); End(summary)
            on an error anywhere: stop, flush the logs, log it, renderer.on_error(error)
            close train-worker and loggers; remove the experiment.log handler
            return LearningResult(model in eval mode, renderer, error, summary, stop_reason)
        """
        if not isinstance(learner, Learner):
            raise TypeError(f"launch needs a Learner, got {type(learner).__name__}")
        starting_epoch = self._starting_epoch()
        checkpointing = self._gradient_checkpointing
        if checkpointing is not None:
            checkpointing = checkpointed_modules(learner.model, checkpointing or None)
        strategy = self._strategy or SingleDevice()
        main = getattr(strategy, "is_main", True)  # False on DDP ranks > 0: no files, no output
        if main:
            self.directory.mkdir(parents=True, exist_ok=True)
        with experiment_log(self._application_log if main else None):
            interrupter = self._interrupter
            if not main:
                renderer: MetricsRenderer = CliMetricsRenderer(io.StringIO())
            elif self._renderer is not None:
                renderer = self._renderer
            else:
                renderer = default_renderer(interrupter)
            loggers = self._loggers or [FileMetricLogger(self.directory)]
            store = EventStore(loggers if main else [])
            processor = AsyncProcessorTraining(
                FullEventProcessorTraining(self._metrics, renderer, store),
                on_error=lambda error: interrupter.stop(f"metrics thread failed: {error!r}"),
            )
            checkpointer = (
                TrainingCheckpointer(self._checkpointer, self._early_stopping)
                if self._checkpointer is not None
                else None
            )
            components = TrainingComponents(
                num_epochs=self._num_epochs,
                interrupter=interrupter,
                processor=processor,
                store=store,
                grads_accumulation=self._grads_accumulation,
                early_stopping=self._early_stopping,
                checkpointer=checkpointer,
                gradient_checkpointing=checkpointing,
            )
            error: BaseException | None = None
            fit = FitResult(starting_epoch - 1)
            summary: LearnerSummary | None = None
            try:
                log.info(
                    "Starting training for %d epochs at epoch %d", self._num_epochs, starting_epoch
                )
                processor.process_train(Start(self._num_epochs, starting_epoch))
                with graceful_stop(interrupter):
                    fit = strategy.fit(
                        learner, self._train, self._valid, components, starting_epoch
                    )
                processor.flush()
                if self._summary and processor.error is None and main:
                    summary = self._write_summary(learner, store, fit)
            except Exception as caught:  # B3: reported in the result, never lost
                error = caught
            finally:
                error = _finish(processor, store, checkpointer, summary, error)
                renderer = processor.processor.renderer
        learner.model.eval()
        return LearningResult(
            learner.model, renderer, error, summary, fit.stop_reason, fit.last_epoch
        )

    def _starting_epoch(self) -> int:
        """The first epoch to train; checks a requested checkpoint exists before anything runs."""
        if self._resume is None and not self._resume_latest:
            return 1
        if self._checkpointer is None:
            raise ValueError(
                "resuming needs checkpointers: call with_default_checkpointers() (or "
                "with_checkpointers(...)) before checkpoint(epoch) / resume_latest()"
            )
        if self._resume_latest:
            latest = self._checkpointer.latest_complete_epoch()
            return 1 if latest is None else latest + 1
        assert self._resume is not None
        if not manifest_path(self._checkpointer.directory, self._resume).exists():
            raise CheckpointError(
                f"no complete checkpoint of epoch {self._resume} in "
                f"{self._checkpointer.directory}; complete epochs: "
                f"{self._checkpointer.complete_epochs()}"
            )
        return self._resume + 1

    def _write_summary(
        self, learner: Learner[M], store: EventStore, fit: FitResult
    ) -> LearnerSummary:
        summary = LearnerSummary.collect(
            store,
            self._summary_metrics,
            fit.last_epoch,
            model=describe_model(learner.model),
            stop_reason=fit.stop_reason,
        )
        atomic_write(self.directory / "summary.json", summary.dumps().encode("utf-8"))
        return summary


def _finish(
    processor: AsyncProcessorTraining,
    store: EventStore,
    checkpointer: TrainingCheckpointer | None,
    summary: LearnerSummary | None,
    error: BaseException | None,
) -> BaseException | None:
    """End a run whatever happened: drain the metrics thread, finish the checkpoint writes, send
    ``End``, show the error, close the logs and the renderer. Returns the run's first error."""
    processor.flush()
    error = error or processor.error
    if error is not None:
        log.error("Training failed", exc_info=error)
    if checkpointer is not None:
        try:
            checkpointer.close()
        except Exception as caught:  # a failed write is the run's error
            error = error or caught
    processor.process_train(End(summary))
    renderer = processor.close()
    if error is not None:
        renderer.on_error(error)
    try:
        store.close()
    except Exception as caught:  # keep the first error
        error = error or caught
    renderer_close = getattr(renderer, "close", None)
    if renderer_close is not None:
        renderer_close()
    return error


def _numeric(metric: Any) -> Numeric:
    if not isinstance(metric, Numeric):
        raise TypeError(
            f"{type(metric).__name__} is not a numeric metric (it needs attributes, value, "
            "running_value and final_value); register it with metric_train/metric_valid"
        )
    return metric
