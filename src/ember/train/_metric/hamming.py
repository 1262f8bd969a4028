"""The Hamming score of multi-label predictions: the percent of labels predicted right."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember._checks import check_real
from ember._rundir.metric_logs import format_number
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import MeanMetric

__all__ = ["HammingScore", "HammingScoreInput"]


@dataclass(frozen=True, slots=True)
class HammingScoreInput:
    """Scores ``[B, C]`` (probabilities, or logits if ``sigmoid``) and 0/1 targets ``[B, C]``."""

    outputs: torch.Tensor
    targets: torch.Tensor


class HammingScore(MeanMetric):
    """``Hamming Score @ Threshold(t)``: ``100 * mean((score > t) == target)``, weighted by samples.

    With ``sigmoid=True`` the outputs are logits and go through a sigmoid first.
    """

    unit = "%"
    higher_is_better = True

    def __init__(self, threshold: float = 0.5, sigmoid: bool = False) -> None:
        threshold = check_real(
            "threshold", threshold, minimum=0.0, strict=True, maximum=1.0, strict_maximum=True
        )
        if not isinstance(sigmoid, bool):
            raise TypeError(f"sigmoid must be a bool, got {sigmoid!r}")
        self.metric_name = f"Hamming Score @ Threshold({format_number(float(threshold))})"
        super().__init__()
        self.threshold = float(threshold)
        self.sigmoid = sigmoid

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`HammingScoreInput`."""
        return HammingScoreInput

    def update(self, item: HammingScoreInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch."""
        outputs, targets = item.outputs.detach(), item.targets.detach()
        if outputs.dim() != 2 or outputs.shape != targets.shape:
            raise ValueError(
                f"{self.name} needs outputs and targets of one shape [B, C], got "
                f"{tuple(outputs.shape)} and {tuple(targets.shape)}"
            )
        scores = outputs.sigmoid() if self.sigmoid else outputs
        # an exact integer count: a float mean over B*C labels would round
        matches = int(((scores > self.threshold) == targets.bool()).sum().item())
        labels = outputs.numel()
        return self._state.update(100.0 * matches / labels if labels else 0.0, outputs.shape[0])

    def __repr__(self) -> str:
        return f"HammingScore(threshold={self.threshold}, sigmoid={self.sigmoid})"
