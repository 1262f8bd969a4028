"""Classification accuracy, in percent: correct samples over samples counted, per epoch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.ratio import RatioMetric

__all__ = ["AccuracyInput", "AccuracyMetric"]


@dataclass(frozen=True, slots=True)
class AccuracyInput:
    """Scores per class ``[B, C]`` (logits or probabilities) and integer targets ``[B]``."""

    outputs: torch.Tensor
    targets: torch.Tensor


class AccuracyMetric(RatioMetric):
    """``Accuracy`` in percent: ``100 * correct / counted`` (``argmax(outputs) == targets``).

    Correct samples are counted as integers and divided in float64, per batch and for the
    epoch (the epoch's correct over its counted samples: 295 of 360 is 81.94444444444444).
    With ``pad_token``, samples whose target is the pad token are left out of both counts
    (Burn still weighs them; ember does not).
    """

    metric_name = "Accuracy"
    unit = "%"
    higher_is_better = True

    def __init__(self, pad_token: int | None = None) -> None:
        super().__init__()
        self.pad_token = pad_token

    def ratio(self, numerator: float, denominator: float) -> float:
        """Percent correct."""
        return 100.0 * numerator / denominator if denominator else 0.0

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`AccuracyInput`."""
        return AccuracyInput

    def update(self, item: AccuracyInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch."""
        outputs, targets = item.outputs.detach(), item.targets.detach()
        if outputs.dim() != 2 or targets.dim() != 1 or outputs.shape[0] != targets.shape[0]:
            raise ValueError(
                "AccuracyMetric needs outputs [B, C] and targets [B], got "
                f"{tuple(outputs.shape)} and {tuple(targets.shape)}"
            )
        correct = outputs.argmax(dim=1) == targets
        if self.pad_token is not None:
            correct = correct[targets != self.pad_token]
        return self._record(int(correct.sum().item()), correct.numel())
