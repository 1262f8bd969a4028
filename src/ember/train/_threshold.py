"""Stopping on a value: ``SupervisedTraining.stop_when(metric, threshold)``.

A training script that stops once its loss is small enough (pytorch/examples' regression:
``if loss < 1e-3: break``) reads the loss back every step. :class:`ThresholdStop` reads it
where every metric value is read, on the metrics thread, as a logger: a train batch's value of
the metric (a validation epoch's value, for ``split="valid"``) that reaches the threshold is
kept as the stop's reason, and the loop, which waits for the metrics thread after every train
batch when a train threshold is set (a host sync per step; once a round for a valid one), stops
the run after that batch: the same batch in every run. The run then ends as every stop does
(``docs/training.md``, "Stopping"): at the end of the optimizer window under way, with a
mid-round checkpoint when the run takes them, so ``resume_latest()`` goes on exactly from
there; ``result.stop_reason`` says which value reached the threshold, at which batch. Under a
data-parallel strategy the main process reads the values, which reach it a chunk of steps at a
time (``DistributedDataParallel(report_every=...)``): every process stops at the end of the
next chunk, the same step in every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember._checks import check_real
from ember._rundir.metric_logs import format_number
from ember.train._metric.base import NamedMetric, metric_name
from ember.train._metric.values import MetricValue
from ember.train._vocabulary import Direction, Split, as_vocabulary

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["ThresholdStop"]


class ThresholdStop:
    """A logger that stops the run once ``metric`` reaches ``threshold`` on ``split`` (each
    train batch's value, or each validation epoch's value): at or below it for a metric where
    lower is better, at or above it for one where higher is better (``Accuracy``)."""

    def __init__(
        self, metric: str | NamedMetric, threshold: float, split: Split | str = Split.TRAIN
    ) -> None:
        self.name = metric_name(metric)
        self.threshold = check_real("threshold", threshold, minimum=-math.inf)
        self.split = as_vocabulary(Split, split, "split")
        if self.split is Split.TEST:
            raise ValueError("split must be 'train' or 'valid', got 'test'")
        self.direction = Direction.LOWEST
        self.reason: str | None = None
        """Why the run stops (its ``stop_reason``), once a value reached the threshold; the
        loop reads it (``_loop.py``)."""

    def start(self, config: Mapping[str, Any]) -> None:
        """Refuse, before training, a metric the run does not register on the split; learn
        which way is better for it."""
        registered = config.get("metrics", {}).get(self.split.value, [])
        if self.name not in registered:
            raise ValueError(
                f"stop_when reads the {self.split.value} metric {self.name!r}, which this run "
                f"does not register (its {self.split.value} metrics: {registered}); register "
                f"it (metrics(...) or metric_{self.split.value}_numeric(...)) or name one of those"
            )
        direction = config.get("directions", {}).get(self.name, Direction.LOWEST.value)
        self.direction = as_vocabulary(Direction, direction, "direction")
        self.reason = None

    def log(self, values: Sequence[MetricValue]) -> None:
        """Stop the run at the first value that reaches the threshold."""
        if self.reason is not None:
            return
        final = self.split is Split.VALID  # a validation's epoch value; each train batch's
        for value in values:
            if value.name != self.name or value.split is not self.split or value.final != final:
                continue
            if self._reached(value.value):
                self._stop(value)
                return

    def _reached(self, value: float) -> bool:
        if self.direction is Direction.LOWEST:
            return value <= self.threshold
        return value >= self.threshold

    def _stop(self, value: MetricValue) -> None:
        sign = "<=" if self.direction is Direction.LOWEST else ">="
        where = f"epoch {value.epoch}" if value.final else f"epoch {value.epoch}, step {value.step}"
        self.reason = (
            f"stop_when: {self.split.value} {self.name} {format_number(value.value)} {sign} "
            f"{format_number(self.threshold)} ({where})"
        )

    def end_split(self, epoch: int, split: Split) -> None:
        """Nothing to make durable."""

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Nothing to record."""

    def close(self) -> None:
        """Nothing to release."""

    def __repr__(self) -> str:
        return f"ThresholdStop({self.name!r}, {self.threshold!r}, split={self.split.value!r})"
