"""Read access to logged metric values: what checkpointing strategies, early stopping and the
summary ask (the event store answers)."""

from __future__ import annotations

from typing import Protocol

from ember.train._vocabulary import Direction, Split

__all__ = ["MetricQuery"]


class MetricQuery(Protocol):
    """Read access to logged metric values, as checkpointing and early stopping need it."""

    def find_metric(self, name: str, epoch: int, split: Split) -> float | None:
        """The value of ``name`` for ``epoch`` on ``split``; None when nothing was logged."""
        ...

    def find_epoch(self, name: str, direction: Direction, split: Split) -> int | None:
        """The best epoch for ``name`` (ties keep the earliest); None when epoch 1 has no data."""
        ...
