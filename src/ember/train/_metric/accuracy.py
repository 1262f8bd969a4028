"""Classification accuracy, in percent, weighted by the number of samples counted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import MeanMetric

__all__ = ["AccuracyInput", "AccuracyMetric"]


@dataclass(frozen=True, slots=True)
class AccuracyInput:
    """Scores per class ``[B, C]`` (logits or probabilities) and integer targets ``[B]``."""

    outputs: torch.Tensor
    targets: torch.Tensor


class AccuracyMetric(MeanMetric):
    """``Accuracy``: ``100 * mean(argmax(outputs) == targets)``, weighted by samples.

    With ``pad_token``, samples whose target is the pad token are left out of both the count
    and the weight (Burn still weighs them; ember does not).
    """

    metric_name = "Accuracy"
    unit = "%"
    higher_is_better = True

    def __init__(self, pad_token: int | None = None) -> None:
        super().__init__()
        self.pad_token = pad_token

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
        counted = correct.numel()
        accuracy = 100.0 * correct.float().mean().item() if counted else 0.0
        return self._state.update(accuracy, counted)
