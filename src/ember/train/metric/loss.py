"""The loss metric: the mean of each batch's loss tensor, weighted by its number of elements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember.train.metric.base import MetricEntry, MetricMetadata
from ember.train.metric.state import MeanMetric

__all__ = ["LossInput", "LossMetric"]


@dataclass(frozen=True, slots=True)
class LossInput:
    """A loss tensor: a reduced scalar, or one value per sample for sample weighting."""

    tensor: torch.Tensor


class LossMetric(MeanMetric):
    """``Loss``: the batch value is ``loss.mean()``, its weight the number of loss elements.

    A mean-reduced loss weighs 1, so the epoch value is the plain mean of the batch losses
    (Burn's rule); pass per-sample losses (``reduction="none"``) to weight by samples.
    """

    metric_name = "Loss"

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`LossInput`."""
        return LossInput

    def update(self, item: LossInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch's loss."""
        loss = item.tensor
        count = loss.numel()
        value = loss.item() if count == 1 else loss.detach().double().mean().item()
        return self._state.update(value, count)
