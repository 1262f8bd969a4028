"""The loss metric: the mean of each batch's loss tensor, weighted by its number of elements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember._frozen import set_field
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import MeanMetric

__all__ = ["LossInput", "LossMetric"]


@dataclass(frozen=True, slots=True, init=False)
class LossInput:
    """A loss tensor: a reduced scalar, or one value per sample for sample weighting.

    ``value`` is the mean already read to the host, when the caller has it (the metrics
    thread reads a whole chunk of scalar losses at once). ``summed_over``: the scalar loss is
    a sum over that many samples (``reduction="sum"``), logged per sample.
    """

    tensor: torch.Tensor
    value: float | None = None
    summed_over: int | None = None

    def __init__(
        self, tensor: torch.Tensor, value: float | None = None, summed_over: int | None = None
    ) -> None:
        set_field(self, "tensor", tensor)  # written out: one per batch (ember/_frozen.py)
        set_field(self, "value", value)
        set_field(self, "summed_over", summed_over)

    def host_value(self) -> float:
        """The mean loss as a Python float (read from the tensor unless already known)."""
        if self.value is not None:
            return self.value
        tensor = self.tensor.detach()
        return tensor.item() if tensor.numel() == 1 else tensor.double().mean().item()


class LossMetric(MeanMetric):
    """``Loss``: the batch value is ``loss.mean()``, its weight the number of loss elements.

    A mean-reduced loss weighs 1, so the epoch value is the plain mean of the batch losses
    (Burn's rule); pass per-sample losses (``reduction="none"``) to weight by samples. A loss
    summed over ``n`` samples (the output's ``summed_over=n``) logs ``loss / n`` with weight
    ``n``: the epoch value is the mean per sample.
    """

    metric_name = "Loss"

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`LossInput`."""
        return LossInput

    def update(self, item: LossInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch's loss."""
        if item.summed_over is not None:
            total = item.host_value()  # the epoch's sum adds these, as a raw loop's total does
            return self._state.update(total / item.summed_over, item.summed_over, total)
        return self._state.update(item.host_value(), item.tensor.numel())
