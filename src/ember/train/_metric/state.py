"""The running state shared by numeric metrics whose epoch value is a weighted mean."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ember._rundir.metric_logs import NumericEntry, format_number
from ember.train._metric.base import MetricAttributes, MetricEntry
from ember.train._metric.resumable import check_state_fields, state_float

__all__ = [
    "ItemMeanMetric",
    "MeanMetric",
    "NumericMetricBase",
    "NumericMetricState",
    "format_value",
]


def format_value(value: float, precision: int, unit: str | None) -> str:
    """A value for people: fixed ``precision`` decimals, exponent form for tiny values."""
    threshold = 0.1 ** (precision - 1)
    text = (
        f"{value:.{precision}e}"
        if abs(value) < threshold and value != 0
        else f"{value:.{precision}f}"
    )
    return f"{text} {unit}" if unit else text


@dataclass(slots=True)
class NumericMetricState:
    """Weighted running mean over an epoch: each batch adds ``value`` with weight ``count``.

    The epoch value is ``sum(value * count) / sum(count)``; an epoch without batches is NaN.
    """

    name: str
    unit: str | None = None
    precision: int = 2
    _sum: float = 0.0
    _count: float = 0.0
    _current: float = math.nan
    _current_count: float = 0.0

    def update(self, value: float, count: float, total: float | None = None) -> MetricEntry:
        """Add one batch and return its entry (``value,count`` in the log); ``total`` is
        ``value * count`` when the caller has it exactly (a summed loss: its sum, whose
        division by ``count`` gave ``value``), so the epoch value is the exact sum's mean."""
        self._sum += value * count if total is None else total
        self._count += count
        self._current = value
        self._current_count = count
        return MetricEntry(
            self.name, self._formatted(), f"{format_number(value)},{format_number(count)}"
        )

    def compute(self) -> MetricEntry:
        """The epoch entry (``mean,final`` in the log)."""
        return MetricEntry(self.name, self._formatted(), self.final_value().serialize())

    def value(self) -> NumericEntry:
        """The last batch's value and weight."""
        return NumericEntry(self._current, weight=self._current_count)

    def running_value(self) -> NumericEntry:
        """The epoch so far, weighted by the total count."""
        return NumericEntry(self._mean(), weight=self._count)

    def final_value(self) -> NumericEntry:
        """The epoch value."""
        return NumericEntry(self._mean(), final=True)

    def state_dict(self) -> dict[str, Any]:
        """The sums so far: ``{"sum", "count", "current", "current_count"}``."""
        return {
            "sum": self._sum,
            "count": self._count,
            "current": self._current,
            "current_count": self._current_count,
        }

    def load_state_dict(self, state: dict[str, Any], owner: object) -> None:
        """Continue from a :meth:`state_dict` of ``owner`` (named in a ValueError)."""
        fields = ("sum", "count", "current", "current_count")
        state = dict(check_state_fields(owner, state, fields))
        values = [state_float(state, owner, field) for field in fields]
        self._sum, self._count, self._current, self._current_count = values

    def reset(self) -> None:
        """Start a new epoch."""
        self._sum = 0.0
        self._count = 0.0
        self._current = math.nan
        self._current_count = 0.0

    def _mean(self) -> float:
        return self._sum / self._count if self._count else math.nan

    def _formatted(self) -> Callable[[], str]:
        running, current = self._mean(), self._current

        def text() -> str:
            return (
                f"epoch {format_value(running, self.precision, self.unit)} - "
                f"batch {format_value(current, self.precision, self.unit)}"
            )

        return text


class NumericMetricBase:
    """Name, input type and attributes of a numeric metric, from class attributes.

    Subclasses set ``metric_name``, ``unit``, ``higher_is_better`` and ``precision``.
    """

    metric_name: str = ""
    unit: str | None = None
    higher_is_better: bool = False
    precision: int = 2

    @property
    def name(self) -> str:
        """The metric's name, also its log-file stem."""
        return self.metric_name

    @property
    def input_type(self) -> type[Any]:
        """What ``update`` reads; ``object`` means the metadata only."""
        return object

    @property
    def attributes(self) -> MetricAttributes:
        """Unit and direction."""
        return MetricAttributes(unit=self.unit, higher_is_better=self.higher_is_better)


class MeanMetric(NumericMetricBase):
    """Base of numeric metrics whose epoch value is the weighted mean of their batch values.

    Subclasses set the class attributes and implement ``update`` by calling
    ``self._state.update(value, weight)``.
    """

    def __init__(self) -> None:
        self._state = NumericMetricState(self.metric_name, self.unit, self.precision)

    def compute(self) -> MetricEntry:
        """The epoch's weighted mean."""
        return self._state.compute()

    def clear(self) -> None:
        """Start a new epoch."""
        self._state.reset()

    def value(self) -> NumericEntry | None:
        """The last batch's value."""
        return self._state.value()

    def running_value(self) -> NumericEntry:
        """The epoch so far."""
        return self._state.running_value()

    def final_value(self) -> NumericEntry:
        """The epoch value."""
        return self._state.final_value()

    def state_dict(self) -> dict[str, Any]:
        """The epoch's running mean (``StatefulMetric``; subclasses add their own fields)."""
        return {"mean": self._state.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict`."""
        self._state.load_state_dict(check_state_fields(self, state, ("mean",))["mean"], self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ItemMeanMetric(MeanMetric):
    """A mean metric whose batches weigh their items (``Loss``, ``ValueMetric``): the epoch
    value is the mean per item.

    Until ember 0.2 these batches weighed 1. An epoch resumed from a mid-round checkpoint of
    0.2 (its state has no ``"weights"``) goes on weighing its batches 1, as it began, so its
    batch lines and epoch value are those 0.2 would have logged; the next epoch weighs items.
    """

    def __init__(self) -> None:
        super().__init__()
        self._per_batch = False  # an epoch begun by ember 0.2: its batches weigh 1

    def _weight(self, items: int | None) -> int:
        """A batch's weight: its ``items`` (1 when unknown, or in an epoch begun by 0.2)."""
        return 1 if items is None or self._per_batch else items

    def clear(self) -> None:
        """Start a new epoch, its batches weighing their items."""
        super().clear()
        self._per_batch = False

    def state_dict(self) -> dict[str, Any]:
        """The epoch's running mean, its batches weighing items."""
        return {**super().state_dict(), "weights": "items"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict` (or 0.2's, whose batches weighed 1)."""
        super().load_state_dict(state)
        self._per_batch = state.get("weights") != "items"
