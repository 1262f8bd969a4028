"""``LearningResult``: how a training run ended (what ``SupervisedTraining.launch`` returns)."""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from torch import nn

from ember.data import DataLoader
from ember.train._checkpoint.export import CheckpointEpoch, load_checkpoint
from ember.train._evaluation.evaluator import EvaluatorBuilder
from ember.train._evaluation.summary import EvaluationSummary
from ember.train._metric.base import Metric, Numeric
from ember.train._precision import Precision
from ember.train._renderer.base import EvaluationRenderer, MetricsRenderer
from ember.train._strategy.base import SupervisedLearningStrategy
from ember.train._summary import LearnerSummary

__all__ = ["LearningResult"]

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True, slots=True)
class LearningResult(Generic[M]):
    """How a run ended.

    ``model`` is the trained model in eval mode (call ``.train()`` to go on training);
    ``error`` is the exception that ended training, with its ``__traceback__``, or None;
    ``stop_reason`` says why training ended before ``num_epochs`` (early stopping, an
    interrupt), or is None; ``summary`` is set when the builder asked for one.

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

    def evaluate(
        self,
        tests: Sequence[tuple[str, DataLoader[Any]]],
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
        evaluator = builder.build(self.model)  # checks the metrics before loading anything
        if checkpoint is not None:
            load_checkpoint(self.directory, checkpoint, into=self.model)
        return evaluator.eval_all(tests)
