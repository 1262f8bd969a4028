"""Hamming score: a hand example, torchmetrics on uneven batches, sigmoid, validation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.functional.classification import multilabel_accuracy

from ember.data import Progress
from ember.extend import HammingScoreInput, MetricMetadata
from ember.train import HammingScore

META = MetricMetadata(Progress(1, 1), 1, None)


def test_hamming_score_by_hand() -> None:
    """Five of six labels right: 83.3 %, weighted by the 2 samples."""
    metric = HammingScore()
    outputs = torch.tensor([[0.9, 0.2, 0.6], [0.1, 0.7, 0.4]])
    targets = torch.tensor([[1, 0, 1], [0, 1, 1]])
    entry = metric.update(HammingScoreInput(outputs, targets), META)
    value = metric.value()
    assert value is not None and value.value == pytest.approx(500 / 6)
    assert entry.serialized.endswith(",2")
    assert metric.name == "Hamming Score @ Threshold(0.5)"
    assert metric.attributes.unit == "%" and metric.attributes.higher_is_better


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 8), min_size=1, max_size=6),
    st.integers(2, 5),
    st.sampled_from([0.3, 0.5, 0.75]),
    st.booleans(),
    st.integers(0, 10**6),
)
def test_epoch_value_over_uneven_batches_matches_torchmetrics(
    sizes: list[int], labels: int, threshold: float, sigmoid: bool, seed: int
) -> None:
    """The epoch value equals torchmetrics' micro multi-label accuracy of all batches."""
    generator = torch.Generator().manual_seed(seed)
    metric = HammingScore(threshold, sigmoid=sigmoid)
    all_outputs, all_targets = [], []
    for size in sizes:
        outputs = torch.randn(size, labels, generator=generator)
        if not sigmoid:
            outputs = outputs.sigmoid()
        targets = torch.randint(0, 2, (size, labels), generator=generator)
        metric.update(HammingScoreInput(outputs, targets), META)
        all_outputs.append(outputs.sigmoid() if sigmoid else outputs)
        all_targets.append(targets)
    metric.compute()
    expected = multilabel_accuracy(
        torch.cat(all_outputs),
        torch.cat(all_targets),
        num_labels=labels,
        threshold=threshold,
        average="micro",
    )
    assert metric.final_value().value == pytest.approx(100 * float(expected))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"threshold": 0.0}, ValueError, "threshold must be > 0, got 0.0"),
        ({"threshold": 1.5}, ValueError, "threshold must be < 1, got 1.5"),
        ({"threshold": "0.5"}, TypeError, r"threshold must be a real number, got '0.5' \(str\)"),
        ({"sigmoid": 1}, TypeError, "sigmoid must be a bool, got 1"),
    ],
)
def test_constructor_validates(
    kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    """Bad arguments raise at construction, naming the value."""
    with pytest.raises(error, match=match):
        HammingScore(**kwargs)  # type: ignore[arg-type]
