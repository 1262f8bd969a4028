"""Area under the ROC curve over a whole epoch, from every prediction of the epoch.

AUROC is not a mean of batch values, so the metric keeps every batch's scores and targets and
computes the epoch value once, at :meth:`AurocMetric.compute`. Per class, it is the
Mann-Whitney statistic: the probability that a random positive scores above a random negative,
ties counting half. It is computed from tie-averaged ranks after one sort, in O(n log n) time and
O(n) memory per class (Burn compares all pairs: O(n²)).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ember._rundir.metric_logs import NumericEntry
from ember.train._metric.base import MetricAttributes, MetricEntry, MetricMetadata
from ember.train._metric.confusion import ClassReduction, ConfusionStatsInput
from ember.train._metric.resumable import check_state_fields, state_count, state_tensor
from ember.train._metric.state import format_value

__all__ = ["AurocMetric", "auroc_per_class"]


def auroc_per_class(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The AUROC of each column of ``scores`` ``[N, C]`` against boolean ``targets`` ``[N, C]``.

    A column without positives or without negatives has no AUROC: NaN. Float64, in ``[0, 1]``.
    """
    n, classes = scores.shape
    if n == 0:
        return torch.full((classes,), math.nan, dtype=torch.float64, device=scores.device)
    ordered, order = scores.double().sort(dim=0)
    positive = targets.bool().gather(0, order)
    # tie groups within each column, numbered along the columns laid end to end
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[1:] = ordered[1:] != ordered[:-1]
    group = starts.T.reshape(-1).cumsum(0) - 1
    sizes = torch.bincount(group).double()
    # 1-based rank in the laid-out columns: a tie group takes the mean of the ranks it covers
    mean_rank = sizes.cumsum(0) - sizes + (sizes + 1) / 2
    offsets = torch.arange(classes, device=scores.device, dtype=torch.float64).unsqueeze(1) * n
    ranks = mean_rank[group].reshape(classes, n) - offsets
    pos_t = positive.T
    positives = pos_t.sum(dim=1).double()
    negatives = n - positives
    rank_sum = (ranks * pos_t).sum(dim=1)
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


class AurocMetric:
    """``AUROC [{reduction}]``: the epoch's area under the ROC curve, in percent.

    Reads a :class:`ConfusionStatsInput` (scores ``[B, C]``, boolean targets ``[B, C]``).
    Macro averages the classes that have both positives and negatives; micro lays all classes
    into one. An undefined AUROC is 50. Batches log nothing (the per-batch entry is "N/A");
    the scores stay where they are (on the device) until the epoch ends.
    """

    def __init__(self, reduction: ClassReduction | str = ClassReduction.MACRO) -> None:
        self.reduction = ClassReduction.parse(reduction)
        self._name = f"AUROC [{self.reduction.value}]"
        self._scores: list[torch.Tensor] = []
        self._targets: list[torch.Tensor] = []
        self._samples = 0
        self._final = math.nan

    @property
    def name(self) -> str:
        """``AUROC [Macro]`` or ``AUROC [Micro]``."""
        return self._name

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`ConfusionStatsInput`."""
        return ConfusionStatsInput

    @property
    def attributes(self) -> MetricAttributes:
        """Percent, higher is better."""
        return MetricAttributes(unit="%", higher_is_better=True)

    def update(self, item: ConfusionStatsInput, metadata: MetricMetadata) -> MetricEntry:
        """Keep the batch for the epoch value; there is no batch value."""
        scores, targets = item.predictions.detach(), item.targets.detach()
        if scores.dim() != 2 or scores.shape != targets.shape:
            raise ValueError(
                f"{self.name} needs predictions and targets of one shape [B, C], got "
                f"{tuple(scores.shape)} and {tuple(targets.shape)}"
            )
        if self._scores and self._scores[0].shape[1] != scores.shape[1]:
            raise ValueError(
                f"{self.name} got {scores.shape[1]} classes after {self._scores[0].shape[1]} "
                "in the same epoch"
            )
        if self._scores and self._scores[0].device != scores.device:  # restored on the CPU
            self._scores = [kept.to(scores.device) for kept in self._scores]
            self._targets = [kept.to(scores.device) for kept in self._targets]
        self._scores.append(scores)
        self._targets.append(targets.bool())
        self._samples += scores.shape[0]
        return MetricEntry(self.name, "epoch N/A % - batch N/A %", MetricEntry.NOT_AVAILABLE)

    def compute(self) -> MetricEntry:
        """Compute the epoch value from every batch (``value,final`` in the log)."""
        self._final = self._epoch_value()
        value = self._final
        return MetricEntry(
            self.name,
            lambda: f"epoch {format_value(value, 2, '%')} - batch N/A %",
            self.final_value().serialize(),
        )

    def _epoch_value(self) -> float:
        if not self._scores:
            return math.nan
        scores, targets = torch.cat(self._scores), torch.cat(self._targets)
        if self.reduction is ClassReduction.MICRO:
            scores, targets = scores.reshape(-1, 1), targets.reshape(-1, 1)
        value = auroc_per_class(scores, targets).nanmean().nan_to_num(nan=0.5)
        return 100.0 * float(value.item())

    def clear(self) -> None:
        """Forget the epoch's batches."""
        self._scores.clear()
        self._targets.clear()
        self._samples = 0
        self._final = math.nan

    def state_dict(self) -> dict[str, Any]:
        """The epoch's scores and targets so far, each as one tensor (``StatefulMetric``)."""
        return {
            "scores": torch.cat(self._scores) if self._scores else None,
            "targets": torch.cat(self._targets) if self._targets else None,
            "samples": self._samples,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict`."""
        checked = check_state_fields(self, state, ("scores", "targets", "samples"))
        scores = state_tensor(checked, self, "scores")
        targets = state_tensor(checked, self, "targets")
        self._scores = [] if scores is None else [scores]
        self._targets = [] if targets is None else [targets.bool()]
        self._samples = state_count(checked, self, "samples")
        self._final = math.nan

    def value(self) -> NumericEntry | None:
        """None: AUROC has no batch value."""
        return None

    def running_value(self) -> NumericEntry | None:
        """None until the epoch value is computed."""
        return None if math.isnan(self._final) else NumericEntry(self._final, weight=self._samples)

    def final_value(self) -> NumericEntry:
        """The epoch value, valid after :meth:`compute` (NaN for an epoch without batches)."""
        return NumericEntry(self._final, final=True)

    def __repr__(self) -> str:
        return f"AurocMetric({self.reduction})"
