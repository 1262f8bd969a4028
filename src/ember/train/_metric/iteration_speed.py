"""Training speed in iterations per second, measured afresh in every epoch."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.resumable import check_state_fields, state_count, state_float
from ember.train._metric.state import MeanMetric

__all__ = ["IterationSpeedMetric"]


class IterationSpeedMetric(MeanMetric):
    """``Iteration Speed``: iterations per second since the split's first batch.

    The first batch of a split only starts the clock (it logs nothing). The clock restarts at
    every split end, so each epoch's value is its own (Burn's accumulates over all epochs).
    """

    metric_name = "Iteration Speed"
    unit = "iter/sec"
    higher_is_better = True

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._clock = clock
        self._start: float | None = None
        self._batches = 0

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch's arrival."""
        now = self._clock()
        if self._start is None:
            self._start = now
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        self._batches += 1
        elapsed = now - self._start
        return self._state.update(self._batches / elapsed if elapsed > 0 else 0.0, 1)

    def clear(self) -> None:
        """Start a new epoch: the clock restarts at its next batch."""
        super().clear()
        self._start = None
        self._batches = 0

    def state_dict(self) -> dict[str, Any]:
        """The batches and seconds of the epoch so far (``StatefulMetric``)."""
        elapsed = None if self._start is None else self._clock() - self._start
        return {**super().state_dict(), "batches": self._batches, "elapsed": elapsed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch: its clock goes on from the seconds saved (the time between the
        checkpoint and the resume is not counted)."""
        super().load_state_dict(state)
        checked = check_state_fields(self, state, ("batches", "elapsed"))
        self._batches = state_count(checked, self, "batches")
        elapsed = None if checked["elapsed"] is None else state_float(checked, self, "elapsed")
        self._start = None if elapsed is None else self._clock() - elapsed
