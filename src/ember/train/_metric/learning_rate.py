"""The learning rate the optimizer used for each batch."""

from __future__ import annotations

from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import MeanMetric

__all__ = ["LearningRateMetric"]


class LearningRateMetric(MeanMetric):
    """``Learning Rate``: the lr of each training batch; the epoch value is their mean.

    Validation batches carry no learning rate and log nothing.
    """

    metric_name = "Learning Rate"

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Record the batch's lr."""
        if metadata.lr is None:
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        return self._state.update(metadata.lr, 1)
