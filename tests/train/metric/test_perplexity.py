"""Perplexity: corpus-level over uneven batches (torchmetrics), pad tokens, no tokens."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.functional.text import perplexity

from ember.data import Progress
from ember.extend import MetricMetadata, PerplexityInput
from ember.train import PerplexityMetric

META = MetricMetadata(Progress(1, 1), 1, None)


def test_uniform_logits_give_the_vocabulary_size() -> None:
    """Uniform predictions over V tokens have perplexity V; the weight is the token count."""
    metric = PerplexityMetric()
    entry = metric.update(
        PerplexityInput(torch.zeros(6, 4), torch.tensor([0, 1, 2, 3, 0, 1])), META
    )
    value = metric.value()
    assert value is not None and value.value == pytest.approx(4.0)
    assert entry.serialized.endswith(",6")
    assert metric.name == "Perplexity" and not metric.attributes.higher_is_better


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(1, 10), min_size=1, max_size=6),
    st.integers(2, 7),
    st.booleans(),
    st.integers(0, 10**6),
)
def test_epoch_value_is_corpus_perplexity(
    sizes: list[int], vocabulary: int, padded: bool, seed: int
) -> None:
    """exp(sum nll / all tokens) of all batches: torchmetrics on their concatenation."""
    generator = torch.Generator().manual_seed(seed)
    pad = 1 if padded else None
    metric = PerplexityMetric(pad_token=pad)
    all_logits, all_targets = [], []
    for size in sizes:
        logits = 3 * torch.randn(size, vocabulary, generator=generator)
        targets = torch.randint(0, vocabulary, (size,), generator=generator)
        metric.update(PerplexityInput(logits, targets), META)
        all_logits.append(logits)
        all_targets.append(targets)
    metric.compute()
    logits, targets = torch.cat(all_logits), torch.cat(all_targets)
    if pad is not None and bool((targets == pad).all()):
        assert metric.final_value().value == math.inf
        return
    expected = perplexity(logits.unsqueeze(0), targets.unsqueeze(0), ignore_index=pad)
    assert metric.final_value().value == pytest.approx(float(expected), rel=1e-5)


def test_no_tokens_give_infinity_and_an_empty_epoch_nan() -> None:
    """A batch of pad tokens only has perplexity inf; an epoch without batches is NaN."""
    metric = PerplexityMetric(pad_token=0)
    assert metric.update(PerplexityInput(torch.zeros(2, 3), torch.zeros(2)), META).serialized == (
        "inf,0"
    )
    metric.clear()
    metric.compute()
    assert math.isnan(metric.final_value().value)


def test_pad_token_must_be_an_int() -> None:
    """pad_token is an int or None."""
    with pytest.raises(TypeError, match="pad_token must be an int or None, got 'x'"):
        PerplexityMetric(pad_token="x")  # type: ignore[arg-type]
