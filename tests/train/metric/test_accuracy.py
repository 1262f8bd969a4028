"""AccuracyMetric counts in integers and divides in float64, per batch and per epoch."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import Progress
from ember.extend import AccuracyInput, MetricMetadata
from ember.train import AccuracyMetric


def batch(correct: int, total: int) -> AccuracyInput:
    """``total`` samples of 2 classes, the first ``correct`` predicted right."""
    targets = torch.zeros(total, dtype=torch.long)
    outputs = torch.zeros(total, 2)
    outputs[:correct, 0] = 1.0
    outputs[correct:, 1] = 1.0
    return AccuracyInput(outputs, targets)


META = MetricMetadata(Progress(1, 1), 1, None)


def test_295_of_360_is_exact() -> None:
    """The epoch value is the epoch's correct over its counted samples, in float64."""
    metric = AccuracyMetric()
    for correct, total in [(100, 128), (100, 128), (95, 104)]:
        metric.update(batch(correct, total), META)
    metric.compute()
    assert metric.final_value().value == 100.0 * 295 / 360 == 81.94444444444444


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 60)), min_size=1, max_size=8))
def test_epoch_value_is_the_ratio_of_the_sums(batches: list[tuple[int, int]]) -> None:
    """For any batches, the epoch value equals 100 * sum(correct) / sum(total) exactly."""
    metric = AccuracyMetric()
    pairs = [(min(c, t), t) for t, c in batches]
    for correct, total in pairs:
        entry = metric.update(batch(correct, total), META)
        assert entry.serialized.split(",")[1] == str(total)
    metric.compute()
    expected = 100.0 * sum(c for c, _ in pairs) / sum(t for _, t in pairs)
    assert metric.final_value().value == expected
