"""AUROC: the pairwise definition and torchmetrics over uneven batches, ties, N/A per batch."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.functional.classification import binary_auroc

from ember.data import Progress
from ember.extend import ConfusionStatsInput, MetricMetadata
from ember.train import AurocMetric, ClassReduction
from ember.train._metric.auroc import auroc_per_class

META = MetricMetadata(Progress(1, 1), 1, None)


def _pairwise(scores: list[float], positive: list[bool]) -> float:
    """Burn's definition: (pairs ranked right + half the ties) / pairs; NaN without pairs."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return math.nan
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def _expected(scores: torch.Tensor, targets: torch.Tensor, reduction: ClassReduction) -> float:
    if reduction is ClassReduction.MICRO:
        scores, targets = scores.reshape(-1, 1), targets.reshape(-1, 1)
    values = [
        _pairwise(scores[:, c].tolist(), targets[:, c].tolist()) for c in range(scores.shape[1])
    ]
    defined = [v for v in values if not math.isnan(v)]
    return 100 * (sum(defined) / len(defined) if defined else 0.5)


def test_batches_are_not_available_and_the_epoch_value_is_computed_once() -> None:
    """Per batch: an N/A entry (not logged) and no value; at the epoch end: the AUROC."""
    metric = AurocMetric()
    scores, targets = (
        torch.tensor([[0.1], [0.4], [0.35], [0.8]]),
        torch.tensor([[0], [0], [1], [1]]),
    )
    entry = metric.update(ConfusionStatsInput(scores, targets.bool()), META)
    assert not entry.is_available and metric.value() is None and metric.running_value() is None
    assert metric.compute().serialized == "75,final"
    assert metric.final_value().value == 75.0
    assert metric.attributes.unit == "%" and metric.attributes.higher_is_better
    metric.clear()
    metric.compute()
    assert math.isnan(metric.final_value().value)


def test_names() -> None:
    """``AUROC [Macro]`` by default, ``AUROC [Micro]`` on request."""
    assert AurocMetric().name == "AUROC [Macro]"
    assert AurocMetric("micro").name == "AUROC [Micro]"


def test_undefined_auroc_is_fifty() -> None:
    """Targets of one kind only: no pairs, 50 %."""
    metric = AurocMetric()
    metric.update(ConfusionStatsInput(torch.rand(5, 2), torch.ones(5, 2).bool()), META)
    assert metric.compute().serialized == "50,final"


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=6),
    st.integers(1, 4),
    st.sampled_from(list(ClassReduction)),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_epoch_value_over_uneven_batches_matches_the_pairwise_definition(
    sizes: list[int], classes: int, reduction: ClassReduction, ties: bool, seed: int
) -> None:
    """Sort-based ranks give Burn's pairwise AUROC (ties half) of all batches together."""
    generator = torch.Generator().manual_seed(seed)
    metric = AurocMetric(reduction)
    all_scores, all_targets = [], []
    for size in sizes:
        scores = torch.rand(size, classes, generator=generator)
        if ties:
            scores = (scores * 4).round() / 4
        targets = torch.randint(0, 2, (size, classes), generator=generator).bool()
        metric.update(ConfusionStatsInput(scores, targets), META)
        all_scores.append(scores)
        all_targets.append(targets)
    metric.compute()
    expected = _expected(torch.cat(all_scores), torch.cat(all_targets), reduction)
    assert metric.final_value().value == pytest.approx(expected)


@settings(max_examples=20, deadline=None)
@given(st.integers(2, 60), st.integers(0, 2**32 - 1))
def test_binary_auroc_matches_torchmetrics(size: int, seed: int) -> None:
    """One column with both classes present equals torchmetrics' binary AUROC."""
    generator = torch.Generator().manual_seed(seed)
    scores = (torch.rand(size, generator=generator) * 10).round() / 10
    targets = torch.arange(size) % 2
    targets = targets[torch.randperm(size, generator=generator)]
    value = auroc_per_class(scores.unsqueeze(1), targets.unsqueeze(1).bool())
    assert float(value) == pytest.approx(float(binary_auroc(scores, targets)))


def test_large_epochs_are_cheap() -> None:
    """200 000 samples of 4 classes take one sort, not 10^10 pairs."""
    generator = torch.Generator().manual_seed(0)
    scores = torch.rand(200_000, 4, generator=generator)
    targets = torch.rand(200_000, 4, generator=generator) < scores  # informative scores
    value = auroc_per_class(scores, targets)
    assert bool(((value > 0.7) & (value < 0.9)).all())


def test_class_count_is_checked() -> None:
    """The class count cannot change within an epoch."""
    metric = AurocMetric()
    metric.update(ConfusionStatsInput(torch.rand(2, 3), torch.zeros(2, 3).bool()), META)
    with pytest.raises(ValueError, match="got 2 classes after 3"):
        metric.update(ConfusionStatsInput(torch.rand(2, 2), torch.zeros(2, 2).bool()), META)
