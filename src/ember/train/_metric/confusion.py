"""Precision, recall and F-beta: ratios of confusion counts, summed over the epoch.

All three read a :class:`ConfusionStatsInput` (scores ``[B, C]`` and boolean targets ``[B, C]``)
and decide which classes each sample predicts either by a threshold on the scores (binary and
multi-label) or by its ``top_k`` best scores (multiclass). Each batch adds its true-positive,
false-positive and false-negative counts per class to the epoch's; the epoch value is recomputed
from the *summed* counts, so micro and macro averages are exact (averaging batch values is not).

A class whose ratio has a zero denominator (precision of a class never predicted, recall of a
class never present) is undefined: the macro average leaves it out, and a value with no defined
class at all is 0 (torchmetrics' ``zero_division=0``).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import torch

from ember._checks import check_positive_int, check_real
from ember._rundir.metric_logs import NumericEntry, format_number
from ember.train._metric.base import MetricAttributes, MetricEntry, MetricMetadata
from ember.train._metric.resumable import (
    check_state_fields,
    state_count,
    state_float,
    state_tensor,
)
from ember.train._metric.state import format_value

__all__ = [
    "ClassReduction",
    "ConfusionStatsInput",
    "FBetaScoreMetric",
    "PrecisionMetric",
    "RecallMetric",
]


class ClassReduction(enum.Enum):
    """How per-class counts become one value; the value is how names print it."""

    MICRO = "Micro"
    """Sum the counts over classes, then take the ratio."""
    MACRO = "Macro"
    """Take the ratio per class, then the mean over the classes where it is defined."""

    @classmethod
    def parse(cls, value: ClassReduction | str) -> ClassReduction:
        """``value`` as a reduction: a member, or its name in any case (``"micro"``)."""
        if isinstance(value, ClassReduction):
            return value
        if isinstance(value, str):
            for member in cls:
                if member.value.lower() == value.lower():
                    return member
        raise ValueError(f"reduction must be ClassReduction.MICRO or .MACRO, got {value!r}")


@dataclass(frozen=True, slots=True)
class ConfusionStatsInput:
    """Scores ``[B, C]`` and one-hot or multi-hot targets ``[B, C]``.

    Threshold rules read the scores as probabilities. ``targets`` is boolean (0/1 ints work too).
    """

    predictions: torch.Tensor
    targets: torch.Tensor


def rust_debug_float(value: float) -> str:
    """A float as Rust's ``{:?}`` prints it (``0.5``, ``1.0``, ``1e-5``), as Burn's names do."""
    text = repr(float(value))
    mantissa, _, exponent = text.partition("e")
    if exponent:
        return f"{mantissa.removesuffix('.0')}e{int(exponent)}"
    return text


def _check_threshold(threshold: float) -> float:
    return check_real(
        "threshold", threshold, minimum=0.0, strict=True, maximum=1.0, strict_maximum=True
    )


class _ConfusionMetric:
    """Shared state and update of the confusion-count metrics.

    Subclasses set ``_label`` (the name's prefix) and implement ``_score(tp, fp, fn)``, a
    per-class ratio in percent that is NaN where undefined.
    """

    _label = ""

    def __init__(
        self,
        *,
        threshold: float | None = None,
        top_k: int | None = None,
        reduction: ClassReduction | str = ClassReduction.MACRO,
    ) -> None:
        if threshold is not None and top_k is not None:
            raise ValueError(
                f"give threshold or top_k, not both (got threshold={threshold}, top_k={top_k})"
            )
        self.top_k = None if top_k is None else check_positive_int("top_k", top_k)
        self.threshold: float | None = None
        if self.top_k is None:
            self.threshold = _check_threshold(0.5 if threshold is None else threshold)
        self.reduction = ClassReduction.parse(reduction)
        self.rule = (
            f"TopK({self.top_k})"
            if self.threshold is None
            else f"Threshold({rust_debug_float(self.threshold)})"
        )
        """The decision rule as Burn prints it: ``Threshold(0.5)`` or ``TopK(1)``."""
        self._name = self._make_name()
        self._totals: torch.Tensor | None = None
        self._samples = 0
        self._current = math.nan
        self._current_samples = 0
        self._running = math.nan

    def _make_name(self) -> str:
        return f"{self._label} @ {self.rule} [{self.reduction.value}]"

    @property
    def name(self) -> str:
        """E.g. ``Precision @ Threshold(0.5) [Macro]``."""
        return self._name

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`ConfusionStatsInput`."""
        return ConfusionStatsInput

    @property
    def attributes(self) -> MetricAttributes:
        """Percent, higher is better."""
        return MetricAttributes(unit="%", higher_is_better=True)

    def _score(self, tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _reduce(self, counts: torch.Tensor) -> torch.Tensor:
        counts = counts.double()
        if self.reduction is ClassReduction.MICRO:
            counts = counts.sum(dim=1, keepdim=True)
        per_class = self._score(counts[0], counts[1], counts[2])
        return per_class.nanmean().nan_to_num(nan=0.0)

    def update(self, item: ConfusionStatsInput, metadata: MetricMetadata) -> MetricEntry:
        """Add one batch's confusion counts and return the batch value, weighted by samples."""
        scores, targets = item.predictions.detach(), item.targets.detach()
        if scores.dim() != 2 or scores.shape != targets.shape:
            raise ValueError(
                f"{self.name} needs predictions and targets of one shape [B, C], got "
                f"{tuple(scores.shape)} and {tuple(targets.shape)}"
            )
        if self.threshold is not None:
            predicted = scores > self.threshold
        else:
            top_k = self.top_k or 1  # set whenever there is no threshold
            top = scores.topk(min(top_k, scores.shape[1]), dim=1).indices
            predicted = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, top, True)
        targets = targets.bool()
        tp = (predicted & targets).sum(dim=0)
        counts = torch.stack([tp, predicted.sum(dim=0) - tp, targets.sum(dim=0) - tp])
        if self._totals is not None and self._totals.shape != counts.shape:
            raise ValueError(
                f"{self.name} got {counts.shape[1]} classes after {self._totals.shape[1]} "
                "in the same epoch"
            )
        if self._totals is not None and self._totals.device != counts.device:
            self._totals = self._totals.to(counts.device)  # restored on the CPU (a resume)
        self._totals = counts if self._totals is None else self._totals + counts
        # one read-back for the batch value and the epoch value so far
        current, running = torch.stack([self._reduce(counts), self._reduce(self._totals)]).tolist()
        samples = scores.shape[0]
        self._samples += samples
        self._current, self._current_samples, self._running = current, samples, running
        return MetricEntry(
            self.name, self._formatted(), f"{format_number(current)},{format_number(samples)}"
        )

    def _formatted(self) -> Callable[[], str]:
        running, current = self._running, self._current

        def text() -> str:
            return f"epoch {format_value(running, 2, '%')} - batch {format_value(current, 2, '%')}"

        return text

    def compute(self) -> MetricEntry:
        """The epoch value, from the summed counts (``value,final`` in the log)."""
        return MetricEntry(self.name, self._formatted(), self.final_value().serialize())

    def clear(self) -> None:
        """Start a new epoch."""
        self._totals = None
        self._samples = 0
        self._current = self._running = math.nan
        self._current_samples = 0

    def state_dict(self) -> dict[str, Any]:
        """The epoch's summed counts and values so far (``StatefulMetric``)."""
        return {
            "totals": None if self._totals is None else self._totals.clone(),
            "samples": self._samples,
            "current": self._current,
            "current_samples": self._current_samples,
            "running": self._running,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict`."""
        fields = ("totals", "samples", "current", "current_samples", "running")
        checked = check_state_fields(self, state, fields)
        self._totals = state_tensor(checked, self, "totals")
        self._samples = state_count(checked, self, "samples")
        self._current = state_float(checked, self, "current")
        self._current_samples = state_count(checked, self, "current_samples")
        self._running = state_float(checked, self, "running")

    def value(self) -> NumericEntry | None:
        """The last batch's value and its number of samples."""
        return NumericEntry(self._current, weight=self._current_samples)

    def running_value(self) -> NumericEntry:
        """The epoch so far, from the summed counts."""
        return NumericEntry(self._running, weight=self._samples)

    def final_value(self) -> NumericEntry:
        """The epoch value (NaN for an epoch without batches)."""
        return NumericEntry(self._running, final=True)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _PrecisionOrRecall(_ConfusionMetric):
    """The constructors shared by precision and recall."""

    @classmethod
    def binary(cls, threshold: float = 0.5) -> Self:
        """For one column of probabilities; a sample is predicted positive above ``threshold``."""
        return cls(threshold=threshold)

    @classmethod
    def multiclass(
        cls, top_k: int = 1, reduction: ClassReduction | str = ClassReduction.MACRO
    ) -> Self:
        """For one class per sample; a sample predicts its ``top_k`` best-scored classes."""
        return cls(top_k=top_k, reduction=reduction)

    @classmethod
    def multilabel(
        cls, threshold: float = 0.5, reduction: ClassReduction | str = ClassReduction.MACRO
    ) -> Self:
        """For any number of classes per sample; a class is predicted above ``threshold``."""
        return cls(threshold=threshold, reduction=reduction)


class PrecisionMetric(_PrecisionOrRecall):
    """``Precision @ {rule} [{reduction}]``: ``100 * TP / (TP + FP)``.

    Build it with :meth:`binary`, :meth:`multiclass` or :meth:`multilabel`; the default is a 0.5
    threshold with the macro average, as in Burn.
    """

    _label = "Precision"

    def _score(self, tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        return 100.0 * tp / (tp + fp)


class RecallMetric(_PrecisionOrRecall):
    """``Recall @ {rule} [{reduction}]``: ``100 * TP / (TP + FN)``.

    Build it with :meth:`binary`, :meth:`multiclass` or :meth:`multilabel`.
    """

    _label = "Recall"

    def _score(self, tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        return 100.0 * tp / (tp + fn)


class FBetaScoreMetric(_ConfusionMetric):
    """``FBetaScore ({beta}) @ {rule} [{reduction}]``: ``100 (1+β²)TP / ((1+β²)TP + β²FN + FP)``.

    ``beta > 1`` weighs recall more, ``beta < 1`` precision; ``beta = 1`` is the F1 score. The
    constructors take ``beta`` first, as Burn's do.
    """

    _label = "FBetaScore"

    def __init__(
        self,
        beta: float = 1.0,
        *,
        threshold: float | None = None,
        top_k: int | None = None,
        reduction: ClassReduction | str = ClassReduction.MACRO,
    ) -> None:
        self.beta = check_real("beta", beta, minimum=0.0, strict=True)
        super().__init__(threshold=threshold, top_k=top_k, reduction=reduction)

    @classmethod
    def binary(cls, beta: float = 1.0, threshold: float = 0.5) -> FBetaScoreMetric:
        """For one column of probabilities; a sample is predicted positive above ``threshold``."""
        return cls(beta, threshold=threshold)

    @classmethod
    def multiclass(
        cls,
        beta: float = 1.0,
        top_k: int = 1,
        reduction: ClassReduction | str = ClassReduction.MACRO,
    ) -> FBetaScoreMetric:
        """For one class per sample; a sample predicts its ``top_k`` best-scored classes."""
        return cls(beta, top_k=top_k, reduction=reduction)

    @classmethod
    def multilabel(
        cls,
        beta: float = 1.0,
        threshold: float = 0.5,
        reduction: ClassReduction | str = ClassReduction.MACRO,
    ) -> FBetaScoreMetric:
        """For any number of classes per sample; a class is predicted above ``threshold``."""
        return cls(beta, threshold=threshold, reduction=reduction)

    def _make_name(self) -> str:
        # e.g. "FBetaScore (1) @ TopK(1) [Macro]": beta printed as Rust's Display does
        return f"FBetaScore ({format_number(self.beta)}) @ {self.rule} [{self.reduction.value}]"

    def _score(self, tp: torch.Tensor, fp: torch.Tensor, fn: torch.Tensor) -> torch.Tensor:
        beta_sq = self.beta * self.beta  # overflows to inf for huge beta instead of raising
        scaled = (1.0 + beta_sq) * tp
        return 100.0 * scaled / (scaled + beta_sq * fn + fp)
