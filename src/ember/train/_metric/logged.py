"""A value a step logs itself: ``current_step().log(name, value)``, averaged per epoch over
the items, as ``Loss`` is."""

from __future__ import annotations

from typing import Any

import torch

from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import ItemMeanMetric

__all__ = ["ValueMetric"]


class ValueMetric(ItemMeanMetric):
    """``{name}``: the values a step logged as ``name`` with ``current_step().log(name, value)``
    (in ``train_step``, ``optimize`` or ``inference_step``), the epoch value their mean, each
    batch weighted by its items as ``Loss`` weighs it (``MetricMetadata.items``; 1 when the
    output does not say it): the epoch values of a loss's terms add up to the epoch ``Loss``.

    For what the model's output does not hold: a GAN's generator loss computed in
    ``optimize``, a term of a loss. A tensor is read on the metrics thread, never on the
    training thread. A batch whose step logged nothing under ``name`` logs nothing.
    """

    def __init__(
        self, name: str, *, unit: str | None = None, higher_is_better: bool = False
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty metric name, got {name!r}")
        if unit is not None and not isinstance(unit, str):
            raise TypeError(f"unit must be a str or None, got {unit!r}")
        self.metric_name = name
        self.unit = unit
        self.higher_is_better = bool(higher_is_better)
        super().__init__()

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Record the batch's value of ``name``, if its step logged one."""
        values = metadata.values
        value: Any = None if values is None else values.get(self.metric_name)
        if value is None:
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        number = value.item() if isinstance(value, torch.Tensor) else float(value)
        return self._state.update(float(number), self._weight(metadata.items))

    def __repr__(self) -> str:
        return f"ValueMetric({self.metric_name!r})"
