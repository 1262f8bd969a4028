"""The loss metric: the mean of each batch's loss, weighted by the items it averages over."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember._frozen import set_field
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import ItemMeanMetric

__all__ = ["LossInput", "LossMetric"]


@dataclass(frozen=True, slots=True, init=False)
class LossInput:
    """A loss tensor: a reduced scalar, or one value per sample for sample weighting.

    ``value`` is the mean already read to the host, when the caller has it (the metrics
    thread reads a whole chunk of scalar losses at once). ``summed_over``: the scalar loss is
    a sum over that many samples (``reduction="sum"``), logged per sample. ``items``: the
    number of items (samples, sequences) the batch's mean loss averages over, when the output
    says it (the built-in outputs: their targets' first dimension).
    """

    tensor: torch.Tensor
    value: float | None = None
    summed_over: int | None = None
    items: int | None = None

    def __init__(
        self,
        tensor: torch.Tensor,
        value: float | None = None,
        summed_over: int | None = None,
        items: int | None = None,
    ) -> None:
        set_field(self, "tensor", tensor)  # written out: one per batch (ember/_frozen.py)
        set_field(self, "value", value)
        set_field(self, "summed_over", summed_over)
        set_field(self, "items", items)

    def host_value(self) -> float:
        """The mean loss as a Python float (read from the tensor unless already known)."""
        if self.value is not None:
            return self.value
        tensor = self.tensor.detach()
        return tensor.item() if tensor.numel() == 1 else tensor.double().mean().item()


class LossMetric(ItemMeanMetric):
    """``Loss``: the batch value is ``loss.mean()``, its weight the number of items it averages.

    The epoch value is the mean per item, as Keras, Lightning's ``self.log`` and a hand loop's
    ``sum(loss * len(batch)) / N`` give it: a short last batch weighs its few items, not as
    much as a full batch (Burn weighs every mean-reduced batch 1). The weight of a mean-reduced
    loss is the output's item count (``LossInput.items``: a built-in output's targets, the
    ``items`` of a ``LossOutput``); an output that does not say it weighs 1. Per-sample losses
    (``reduction="none"``) weigh their number of elements. A loss summed over ``n`` samples
    (the output's ``summed_over=n``) logs ``loss / n`` with weight ``n``.
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
        numel = item.tensor.numel()  # above 1: one loss per sample (or element), each weighs 1
        weight = numel if numel > 1 else self._weight(item.items)
        return self._state.update(item.host_value(), weight)
