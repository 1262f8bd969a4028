"""What ``launch`` refuses before training starts, naming the problem and the fix: tests
without what they need, and metrics that nobody registered where a scheduler, early stopping
or a checkpointing strategy reads them."""

from __future__ import annotations

from typing import Any

from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.run import RunCheckpointer
from ember.train._checkpoint.strategy import (
    ComposedCheckpointingStrategy,
    MetricCheckpointingStrategy,
)
from ember.train._config import TrainingConfig
from ember.train._early_stopping import MetricEarlyStoppingStrategy
from ember.train._learner import Learner
from ember.train._vocabulary import Split

__all__ = ["check_metric_names", "check_monitor", "check_tests", "check_validation"]


def check_tests(config: TrainingConfig, checkpointer: RunCheckpointer | None) -> None:
    """``with_test`` needs the valid split's metrics, and checkpoints to take weights from."""
    if not config.tests:
        return
    check_validation(config, "with_test (it evaluates with the valid split's metrics)")
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


def check_monitor(config: TrainingConfig, learner: Learner[Any]) -> None:
    """A metric-driven scheduler's metric must be registered on the validation split."""
    monitor = learner.monitor
    if monitor is not None:
        check_validation(config, f"the scheduler stepped with the validation metric {monitor!r}")
    valid = sorted(m.name for split, m in config.metrics if split is Split.VALID)
    if monitor is not None and monitor not in valid:
        raise ValueError(
            f"the scheduler is stepped with the validation metric {monitor!r}, which is not "
            f"registered on the valid split (registered: {valid}); register it with "
            f"metric_valid_numeric(...)"
        )


def check_metric_names(config: TrainingConfig) -> None:
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
        if split is Split.VALID:
            check_validation(config, f"{who} on the valid metric {name!r}")
        registered = sorted(m.name for s, m in config.metrics if s is split)
        if name not in registered:
            raise ValueError(
                f"{who} reads the metric {name!r} on the {split.value} split, which is not "
                f"registered there (registered: {registered}); register it (metric_"
                f"{split.value}_numeric(...) or metrics(...)) or fix the name"
            )


def check_validation(config: TrainingConfig, who: str) -> None:
    """Refuse ``who``, which reads validation values, in a run that trains only."""
    if config.valid is None:
        raise ValueError(
            f"{who} needs a validation split, and this run has none: "
            "SupervisedTraining(directory, train) trains only; give it a valid loader, "
            "SupervisedTraining(directory, train, valid), or read a train metric "
            "(split=Split.TRAIN)"
        )
