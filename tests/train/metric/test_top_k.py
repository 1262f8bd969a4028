"""Top-k accuracy: Burn's examples, torchmetrics on uneven batches, pad tokens, validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.functional.classification import multiclass_accuracy

from ember.data import Progress
from ember.extend import MetricMetadata, TopKAccuracyInput
from ember.train import TopKAccuracyMetric

META = MetricMetadata(Progress(1, 1), 1, None)
SCORES = torch.tensor([[0.0, 0.2, 0.8], [1.0, 2.0, 0.5], [0.4, 0.1, 0.2], [0.6, 0.7, 0.2]])


def test_top_k_matches_burns_example() -> None:
    """Two of four targets are in their top 2: 50 %, weighted by the 4 samples."""
    metric = TopKAccuracyMetric(2)
    entry = metric.update(TopKAccuracyInput(SCORES, torch.tensor([2, 2, 1, 1])), META)
    assert entry.serialized == "50,4"
    assert metric.name == "Top-K Accuracy @ TopK(2)"


def test_pad_samples_count_neither_as_samples_nor_as_weight() -> None:
    """Pad targets are left out of the value and of the weight (Burn still weighs them)."""
    metric = TopKAccuracyMetric(2, pad_token=3)
    scores = torch.cat([torch.cat([SCORES, torch.zeros(4, 1)], 1), torch.rand(3, 4)])
    targets = torch.tensor([2, 2, 1, 1, 3, 3, 3])
    assert metric.update(TopKAccuracyInput(scores, targets), META).serialized == "50,4"


def test_k_at_least_the_number_of_classes_is_always_right() -> None:
    """With k >= C every target is among the top k."""
    metric = TopKAccuracyMetric(5)
    assert metric.update(
        TopKAccuracyInput(SCORES, torch.tensor([0, 1, 2, 0])), META
    ).serialized == ("100,4")


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=6),
    st.integers(2, 6),
    st.integers(1, 6),
    st.booleans(),
    st.integers(0, 10**6),
)
def test_epoch_value_over_uneven_batches_matches_torchmetrics(
    sizes: list[int], classes: int, k: int, padded: bool, seed: int
) -> None:
    """The epoch value equals torchmetrics' top-k accuracy of all batches together."""
    k = min(k, classes)
    pad = 0 if padded else None
    generator = torch.Generator().manual_seed(seed)
    metric = TopKAccuracyMetric(k, pad_token=pad)
    all_scores, all_targets = [], []
    for size in sizes:
        scores = torch.randn(size, classes, generator=generator)
        targets = torch.randint(0, classes, (size,), generator=generator)
        metric.update(TopKAccuracyInput(scores, targets), META)
        all_scores.append(scores)
        all_targets.append(targets)
    metric.compute()
    scores, targets = torch.cat(all_scores), torch.cat(all_targets)
    if pad is not None and bool((targets == pad).all()):
        assert metric.final_value().value != metric.final_value().value  # NaN: nothing counted
        return
    expected = multiclass_accuracy(
        scores, targets, num_classes=classes, top_k=k, average="micro", ignore_index=pad
    )
    assert metric.final_value().value == pytest.approx(100 * float(expected))


@pytest.mark.parametrize(
    ("k", "error", "match"),
    [(0, ValueError, "k must be >= 1, got 0"), (1.5, TypeError, "k must be an int, got 1.5")],
)
def test_constructor_validates_k(k: object, error: type[Exception], match: str) -> None:
    """k must be an int >= 1; the message names the value."""
    with pytest.raises(error, match=match):
        TopKAccuracyMetric(k)  # type: ignore[arg-type]


def test_wrong_shapes_are_refused() -> None:
    """Outputs must be [B, C] and targets [B]."""
    with pytest.raises(ValueError, match=r"outputs \[B, C\] and targets \[B\]"):
        TopKAccuracyMetric(1).update(TopKAccuracyInput(SCORES, torch.zeros(3)), META)
