"""``LearningResult``: how a training run ended (what ``SupervisedTraining.launch`` returns)."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from torch import nn
from torch.utils.data import DataLoader as TorchLoader

from ember.data import DataLoader
from ember.train._checkpoint.export import CheckpointEpoch, load_checkpoint
from ember.train._evaluation.evaluator import EvaluatorBuilder
from ember.train._metric.base import Metric, Numeric
from ember.train._metric.query import MetricQuery
from ember.train._precision import Precision
from ember.train._renderer.base import EvaluationRenderer, MetricsRenderer
from ember.train._strategy.base import SupervisedLearningStrategy
from ember.train._summary import EvaluationSummary, LearnerSummary
from ember.train._valid_sets import ValidSets, logged_names
from ember.train._vocabulary import Split, as_vocabulary

__all__ = ["LearningResult", "metric_names"]

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True, slots=True)
class LearningResult(Generic[M]):
    """How a run ended.

    ``model`` is the trained model in eval mode (call ``.train()`` to go on training);
    ``error`` is the exception that ended training, with its ``__traceback__``, or None (by
    default ``launch`` raises ``TrainingError`` carrying this result instead of returning it);
    ``stop_reason`` says why training ended before ``num_epochs`` (early stopping, an
    interrupt), or is None; ``summary`` is set when the builder asked for one.

    ``last_epoch`` is the last *completed* epoch: an epoch whose training pass a stop (Ctrl-C,
    the interrupter) cut short is not counted, even though its partial logs are on disk (a
    resume trains it again from its start); a stop during validation keeps the epoch, whose
    training is complete and checkpointed. The summary's "Total Epochs" is the same number, and
    :meth:`values` gives the epochs ``1..last_epoch``.

    ``checkpoints`` maps each checkpointed epoch to its model file; ``best_epoch`` is the epoch
    the checkpointing strategy keeps for its metric (the default's: lowest valid Loss), or None;
    ``evaluation`` holds the values of the builder's ``with_test`` tests.
    """

    model: M
    renderer: MetricsRenderer
    error: BaseException | None = None
    summary: LearnerSummary | None = None
    stop_reason: str | None = None
    last_epoch: int = 0
    directory: Path | None = None
    best_epoch: int | None = None
    checkpoints: Mapping[int, Path] = field(default_factory=dict)
    evaluation: EvaluationSummary | None = None
    strategy: SupervisedLearningStrategy | None = None
    reader: MetricQuery | None = field(default=None, repr=False)
    """Where :meth:`values` reads the logged epoch values (the run's loggers that read back)."""
    metric_names: Mapping[Split, tuple[str, ...]] = field(default_factory=dict)
    """The names of the metrics registered on each split."""
    inference_step: Callable[[Any], Any] | None = field(default=None, repr=False)
    """What :meth:`evaluate` runs on each batch: the Learner's ``inference_step`` (a plain
    model's is built from its loss and task); None: the model's own ``inference_step``."""

    @property
    def succeeded(self) -> bool:
        """True when training ended without an error."""
        return self.error is None

    @property
    def traceback(self) -> str | None:
        """The error's formatted traceback, or None."""
        if self.error is None:
            return None
        return "".join(traceback.format_exception(self.error))

    def values(self, split: str | Split, name: str) -> dict[int, float]:
        """The logged epoch values of the metric ``name`` on ``split`` (``"train"``,
        ``"valid"``), by epoch, for the completed epochs ``1..last_epoch`` (those before a
        resume included); an epoch value is the split's final line, as the summary reads it.

        ``result.values("valid", "Loss")`` -> ``{1: 0.52, 2: 0.31}``. Read from the run's logs
        (the file logs, or a logger that reads back); no file is parsed by hand.
        """
        wanted = _split(split)
        names = self.metric_names.get(wanted, ())
        if name not in names:
            raise ValueError(
                f"no metric {name!r} was registered on the {wanted.value} split (registered "
                f"there: {sorted(names)}); pass one of those names"
            )
        if self.reader is None:
            raise ValueError(
                "this result has no logs to read values from (no logger of the run reads back); "
                "keep the file logs or add e.g. InMemoryMetricLogger()"
            )
        found = {
            epoch: self.reader.find_metric(name, epoch, wanted)
            for epoch in range(1, self.last_epoch + 1)
        }
        return {epoch: value for epoch, value in found.items() if value is not None}

    def evaluate(
        self,
        tests: Sequence[tuple[str, DataLoader[Any] | TorchLoader[Any]]],
        *metrics: Metric,
        checkpoint: CheckpointEpoch | None = "best",
        renderer: EvaluationRenderer | None = None,
        summary: bool = True,
        precision: Precision = "32",
    ) -> EvaluationSummary:
        """Evaluate the run's model on ``tests`` with ``metrics`` (numeric ones summarised).

        ``checkpoint`` says which weights: ``"best"``, ``"last"`` or an epoch of the run's
        checkpoints, loaded into :attr:`model` first; None evaluates the model as it is. Logs go
        to ``{directory}/test/{name}/``, the table (``summary``) to ``test/summary.json``; the
        model is placed by the training's strategy (DDP: call it on every rank).
        """
        if self.directory is None:
            raise ValueError("this result has no run directory to evaluate in")
        builder = EvaluatorBuilder(self.directory)  # its application log: evaluation.log
        for metric in metrics:
            if isinstance(metric, Numeric):
                builder.metric_numeric(metric)
            else:
                builder.metric(metric)
        if renderer is not None:
            builder.renderer(renderer)
        if summary:
            builder.summary()
        if self.strategy is not None:
            builder.with_strategy(self.strategy)
        builder.precision(precision)
        # checks the metrics before loading anything
        evaluator = builder.build(self.model, step=self.inference_step)
        if checkpoint is not None:
            load_checkpoint(self.directory, checkpoint, into=self.model)
        return evaluator.eval_all(tests)


def _split(split: str | Split) -> Split:
    """A run's split (train or valid), as a member or its value."""
    if split in (Split.TRAIN, Split.VALID, "train", "valid"):
        return as_vocabulary(Split, split, "split")
    raise ValueError(f"split must be 'train' or 'valid', got {split!r}")


def metric_names(
    metrics: Iterable[tuple[Split, Metric]], sets: ValidSets = ()
) -> dict[Split, tuple[str, ...]]:
    """The names the values of registered ``(split, metric)`` pairs are logged under, by split
    (``metric_names``): on the valid split, also those of each other validation set in
    ``sets`` (``Loss (noisy)``)."""
    metrics = list(metrics)
    splits = dict.fromkeys(split for split, _ in metrics)
    return {split: tuple(logged_names(metrics, sets, split)) for split in splits}
