"""The metrics registered for each split, and how one batch's output updates them."""

from __future__ import annotations

import copy
from typing import Any

from ember.train._metric.base import Metric, MetricMetadata, Numeric, adapt
from ember.train._metric.loss import LossInput
from ember.train._metric.values import MetricState
from ember.train._vocabulary import Split

__all__ = ["MetricsTraining"]


class MetricsTraining:
    """The metrics registered for each split, updated in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[Split, list[Metric]] = {split: [] for split in Split}
        # (metric, its input type, whether numeric): protocol checks are too slow per batch
        self._resolved: dict[Split, list[tuple[Metric, type[Any], bool]]] = {
            split: [] for split in Split
        }

    def register(self, split: Split, metric: Metric) -> None:
        """Add ``metric`` to ``split``; a second metric with the same name is refused."""
        if not isinstance(metric, Metric):
            raise TypeError(
                f"metric must have name, input_type, update, compute and clear; "
                f"got {type(metric).__name__}"
            )
        names = [m.name for m in self._metrics[split]]
        if metric.name in names:
            raise ValueError(
                f"a metric named {metric.name!r} is already registered for the {split.value} "
                "split; each metric writes to the file of its name, so names must be unique"
            )
        if any(metric is m for metrics in self._metrics.values() for m in metrics):
            metric = copy.deepcopy(metric)  # one instance per split: each keeps its own state
        self._metrics[split].append(metric)
        self._resolved[split].append((metric, metric.input_type, isinstance(metric, Numeric)))

    def metrics(self, split: Split) -> list[Metric]:
        """The metrics of ``split``."""
        return list(self._metrics[split])

    def update(
        self,
        split: Split,
        item: Any,
        metadata: MetricMetadata,
        loss: LossInput | None = None,
    ) -> list[MetricState]:
        """Update every metric of ``split`` with one batch's output.

        ``loss`` is the item's loss already read back, given to the metrics that read one.
        """
        states = []
        for metric, input_type, numeric in self._resolved[split]:
            given = loss if input_type is LossInput and loss is not None else None
            try:
                adapted = given or adapt(item, input_type)
            except TypeError as error:  # the step's output does not fit this metric
                raise TypeError(
                    f"the {split.value} metric {metric.name!r} ({type(metric).__name__}) "
                    f"cannot read the model's output: {error}"
                ) from error
            entry = metric.update(adapted, metadata)
            value = metric.value() if numeric else None  # type: ignore[attr-defined]
            states.append(MetricState(entry, value))
        return states

    def end_epoch(self, split: Split) -> list[MetricState]:
        """Compute the epoch value of every metric of ``split``, then clear them."""
        states = []
        for metric, _, numeric in self._resolved[split]:
            entry = metric.compute()
            value = metric.final_value() if numeric else None  # type: ignore[attr-defined]
            metric.clear()
            states.append(MetricState(entry, value))
        return states
