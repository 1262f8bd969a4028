"""The total gradient norm of each optimizer step, before clipping."""

from __future__ import annotations

from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.state import MeanMetric

__all__ = ["GradNormMetric"]


class GradNormMetric(MeanMetric):
    """``Gradient Norm``: the total norm of the gradients of every optimizer step, measured
    before clipping (the norm ``clip_grad_norm`` clips by, else the 2-norm).

    Registering it makes the loop measure the norm (one fused reduction per optimizer step, on
    the device); the value is read back here, on the metrics thread, never on the training
    thread. Batches that close no optimizer step (inside an accumulation window) and
    validation batches log nothing.
    """

    metric_name = "Gradient Norm"

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Record the norm of the optimizer step this batch closed, if it closed one."""
        if metadata.grad_norm is None:
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        return self._state.update(float(metadata.grad_norm), 1)
