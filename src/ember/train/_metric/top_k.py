"""Top-k accuracy: a sample counts as correct when its target is among its k best scores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ember._checks import check_optional_int, check_positive_int
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import MeanMetric

__all__ = ["TopKAccuracyInput", "TopKAccuracyMetric"]


@dataclass(frozen=True, slots=True)
class TopKAccuracyInput:
    """Scores per class ``[B, C]`` (logits or probabilities) and integer targets ``[B]``."""

    outputs: torch.Tensor
    targets: torch.Tensor


class TopKAccuracyMetric(MeanMetric):
    """``Top-K Accuracy @ TopK(k)``: percent of samples whose target is in their top ``k``.

    Weighted by the samples counted: with ``pad_token``, samples whose target is the pad token
    count neither as samples nor as weight (Burn still weighs them). With ``k`` at least the
    number of classes every sample is correct.
    """

    unit = "%"
    higher_is_better = True

    def __init__(self, k: int, pad_token: int | None = None) -> None:
        k = check_positive_int("k", k)
        pad_token = check_optional_int("pad_token", pad_token)
        self.metric_name = f"Top-K Accuracy @ TopK({k})"
        super().__init__()
        self.k = k
        self.pad_token = pad_token

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`TopKAccuracyInput`."""
        return TopKAccuracyInput

    def update(self, item: TopKAccuracyInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch."""
        outputs, targets = item.outputs.detach(), item.targets.detach()
        if outputs.dim() != 2 or targets.dim() != 1 or outputs.shape[0] != targets.shape[0]:
            raise ValueError(
                f"{self.name} needs outputs [B, C] and targets [B], got "
                f"{tuple(outputs.shape)} and {tuple(targets.shape)}"
            )
        top = outputs.topk(min(self.k, outputs.shape[1]), dim=1).indices
        hits = (top == targets.unsqueeze(1)).any(dim=1)
        if self.pad_token is None:
            counted = hits.numel()
            correct = int(hits.sum().item())
        else:
            kept = targets != self.pad_token
            # one read-back for both numbers
            correct, counted = torch.stack([(hits & kept).sum(), kept.sum()]).tolist()
        accuracy = 100.0 * correct / counted if counted else 0.0
        return self._state.update(accuracy, counted)

    def __repr__(self) -> str:
        return f"TopKAccuracyMetric(k={self.k}, pad_token={self.pad_token})"
