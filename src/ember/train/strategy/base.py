"""The training-strategy protocol and what every strategy is handed.

A strategy owns the epoch loop: where the model lives, how batches reach it, how gradients are
combined. ember ships :class:`~ember.train.strategy.single.SingleDevice`; a custom strategy is
any object with ``fit`` (see ``examples/``), passed to ``with_training_strategy``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ember.data import DataLoader
from ember.train.interrupter import Interrupter
from ember.train.learner import Learner
from ember.train.metric.store import EventStore
from ember.train.processor import EventProcessor

if TYPE_CHECKING:
    from ember.train.early_stopping import EarlyStoppingStrategy

__all__ = ["FitResult", "SupervisedLearningStrategy", "TrainingComponents"]


@dataclass(frozen=True, slots=True)
class TrainingComponents:
    """Everything a strategy needs besides the learner and the loaders."""

    num_epochs: int
    interrupter: Interrupter
    processor: EventProcessor
    store: EventStore
    grads_accumulation: int | None = None
    early_stopping: EarlyStoppingStrategy | None = None


@dataclass(frozen=True, slots=True)
class FitResult:
    """How a fit ended: the last epoch completed and, if it stopped early, why."""

    last_epoch: int
    stop_reason: str | None = None


@runtime_checkable
class SupervisedLearningStrategy(Protocol):
    """Runs epochs ``starting_epoch..num_epochs`` of training and validation."""

    def fit(
        self,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        """Train; the events of reference §3.3 go to ``components.processor``."""
        ...
