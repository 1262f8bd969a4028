"""Early stopping: end training when a metric stops improving (``docs/design.md``)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ember._checks import check_positive_int
from ember._protocols import added
from ember.train._metric.base import NamedMetric, metric_name
from ember.train._metric.query import MetricQuery
from ember.train._vocabulary import Aggregate, Direction, Split, as_vocabulary, warn_aggregate

__all__ = ["EarlyStoppingStrategy", "MetricEarlyStoppingStrategy", "StoppingCondition"]

log = logging.getLogger("ember.train")


@runtime_checkable
class EarlyStoppingStrategy(Protocol):
    """Asked after each completed epoch (after its checkpoint) whether to stop.

    Its state is part of every checkpoint (JSON), so a resumed run stops where an uninterrupted
    one would. ``reason``, ``state_dict`` and ``load_state_dict`` were added in 0.2.0 with
    defaults (no reason, no state): a strategy written for 0.1.0 (``should_stop`` only) still
    runs, with a warning saying what to add.
    """

    def should_stop(self, epoch: int, query: MetricQuery) -> bool:
        """True to end training after ``epoch``."""
        ...

    @property
    @added("0.2.0")
    def reason(self) -> str | None:
        """Why the last ``should_stop`` said True (shown and kept as the run's stop reason);
        default: None (the run says "early stopping after epoch N")."""
        return None

    @added("0.2.0")
    def state_dict(self) -> dict[str, Any]:
        """The strategy's state as JSON; default: ``{}`` (a stateless strategy)."""
        return {}

    @added("0.2.0")
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned; default: nothing to restore."""


@dataclass(frozen=True, slots=True)
class StoppingCondition:
    """When to stop: after ``n_epochs`` epochs without a new best value."""

    n_epochs: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_epochs", check_positive_int("n_epochs", self.n_epochs))

    @classmethod
    def no_improvement_since(cls, n_epochs: int) -> StoppingCondition:
        """Stop once the best epoch is ``n_epochs`` epochs old."""
        return cls(n_epochs)


class MetricEarlyStoppingStrategy:
    """Stops when ``metric`` has not improved on ``split`` for the condition's epochs.

    Improvement is strict. ``metric`` is a metric object or its name. The state (best epoch and
    value) is part of checkpoints, so a resumed run stops exactly where an uninterrupted one
    would (Burn resets it).
    """

    def __init__(
        self,
        metric: str | NamedMetric,
        direction: Direction | str = Direction.LOWEST,
        split: Split | str = Split.VALID,
        condition: StoppingCondition | None = None,
        *burn: StoppingCondition,
        aggregate: Aggregate | None = None,
    ) -> None:
        if isinstance(direction, Aggregate) or aggregate is not None:
            # 0.1.0's (and Burn's) order: (metric, aggregate, direction, split, condition)
            warn_aggregate("MetricEarlyStoppingStrategy")
        if isinstance(direction, Aggregate):
            direction, split, condition = (
                split if isinstance(split, Direction) else Direction.LOWEST,
                condition if isinstance(condition, Split) else Split.VALID,
                burn[0] if burn else None,
            )
        self.name = metric_name(metric)
        self.direction = as_vocabulary(Direction, direction, "direction")
        self.split = as_vocabulary(Split, split, "split")
        self.condition = condition or StoppingCondition.no_improvement_since(2)
        self.best_epoch = 1
        self.best_value = math.inf if self.direction is Direction.LOWEST else -math.inf
        self.reason: str | None = None

    def should_stop(self, epoch: int, query: MetricQuery) -> bool:
        """Record ``epoch``'s value; True when the best epoch is old enough."""
        value = query.find_metric(self.name, epoch, self.split)
        if value is None:
            log.warning("Can't find metric %r for early stopping.", self.name)
            return False
        lowest = self.direction is Direction.LOWEST
        if value < self.best_value if lowest else value > self.best_value:
            self.best_value, self.best_epoch = value, epoch
            log.info("New best epoch found %d %s: %s", epoch, self.name, value)
            return False
        if epoch - self.best_epoch < self.condition.n_epochs:
            return False
        self.reason = (
            f"early stopping: {self.split.value} {self.name} has not improved since epoch "
            f"{self.best_epoch} ({self.best_value:.4g})"
        )
        log.info("Stopping training loop, %s", self.reason)
        return True

    def state_dict(self) -> dict[str, Any]:
        """The best epoch and value, as JSON."""
        return {"best_epoch": self.best_epoch, "best_value": self.best_value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.best_epoch = int(state["best_epoch"])
        self.best_value = float(state["best_value"])
