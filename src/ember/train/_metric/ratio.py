"""Numeric metrics whose epoch value is a ratio of sums, such as a corpus error rate."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ember._rundir.metric_logs import NumericEntry, format_number
from ember.train._metric.base import MetricEntry
from ember.train._metric.resumable import check_state_fields, state_count, state_float
from ember.train._metric.state import NumericMetricBase, format_value

__all__ = ["RatioMetric"]


class RatioMetric(NumericMetricBase):
    """Base of numeric metrics whose value is ``f(numerator / denominator)``, summed per epoch.

    Each batch adds a numerator (edits, negative log-likelihood, ...) and a denominator (tokens)
    and logs ``f(num / den),den``; the epoch value is ``f(sum(num) / sum(den))`` — the corpus
    value, not a mean of batch values. An epoch without batches is NaN. Subclasses set the
    class attributes, implement :meth:`ratio` and call ``self._record(num, den)`` in ``update``.
    """

    def __init__(self) -> None:
        self._numerator = 0.0
        self._denominator = 0.0
        self._batches = 0
        self._current = math.nan
        self._current_weight = 0.0

    def ratio(self, numerator: float, denominator: float) -> float:
        """The metric value of ``numerator`` over ``denominator``."""
        raise NotImplementedError

    def _record(self, numerator: float, denominator: float) -> MetricEntry:
        self._numerator += numerator
        self._denominator += denominator
        self._batches += 1
        self._current = self.ratio(numerator, denominator)
        self._current_weight = denominator
        return MetricEntry(
            self.name,
            self._formatted(),
            f"{format_number(self._current)},{format_number(denominator)}",
        )

    def _epoch(self) -> float:
        return self.ratio(self._numerator, self._denominator) if self._batches else math.nan

    def _formatted(self) -> Callable[[], str]:
        running, current = self._epoch(), self._current

        def text() -> str:
            return (
                f"epoch {format_value(running, self.precision, self.unit)} - "
                f"batch {format_value(current, self.precision, self.unit)}"
            )

        return text

    def compute(self) -> MetricEntry:
        """The epoch entry (``value,final`` in the log)."""
        return MetricEntry(self.name, self._formatted(), self.final_value().serialize())

    def clear(self) -> None:
        """Start a new epoch."""
        self._numerator = self._denominator = 0.0
        self._batches = 0
        self._current = math.nan
        self._current_weight = 0.0

    def state_dict(self) -> dict[str, Any]:
        """The sums of the epoch so far (``StatefulMetric``)."""
        return {
            "numerator": self._numerator,
            "denominator": self._denominator,
            "batches": self._batches,
            "current": self._current,
            "current_weight": self._current_weight,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict`."""
        fields = ("numerator", "denominator", "batches", "current", "current_weight")
        checked = check_state_fields(self, state, fields)
        self._numerator = state_float(checked, self, "numerator")
        self._denominator = state_float(checked, self, "denominator")
        self._batches = state_count(checked, self, "batches")
        self._current = state_float(checked, self, "current")
        self._current_weight = state_float(checked, self, "current_weight")

    def value(self) -> NumericEntry | None:
        """The last batch's value, weighted by its denominator."""
        return NumericEntry(self._current, weight=self._current_weight)

    def running_value(self) -> NumericEntry:
        """The epoch so far."""
        return NumericEntry(self._epoch(), weight=self._denominator)

    def final_value(self) -> NumericEntry:
        """The epoch value."""
        return NumericEntry(self._epoch(), final=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
