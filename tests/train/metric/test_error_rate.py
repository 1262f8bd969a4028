"""CER and WER: edit distance against a plain DP and torchmetrics, corpus rate, pad tokens."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.functional.text import char_error_rate, word_error_rate

from ember.data import Progress
from ember.extend import CerInput, MetricMetadata, WerInput
from ember.train import CharErrorRate, WordErrorRate
from ember.train._metric.error_rate import edit_distances

META = MetricMetadata(Progress(1, 1), 1, None)


def _levenshtein(a: list[int], b: list[int]) -> int:
    table = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            table[i][j] = min(
                table[i - 1][j] + 1,
                table[i][j - 1] + 1,
                table[i - 1][j - 1] + (a[i - 1] != b[j - 1]),
            )
    return table[len(a)][len(b)]


TOKENS = st.lists(st.integers(0, 3), max_size=8)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(TOKENS, TOKENS), min_size=1, max_size=5))
def test_edit_distances_match_the_textbook_dynamic_program(
    pairs: list[tuple[list[int], list[int]]],
) -> None:
    """The batched, vectorised DP gives each row's Levenshtein distance."""
    width = max(max(len(h) for h, _ in pairs), 1)
    ref_width = max(max(len(r) for _, r in pairs), 1)
    hyp = np.full((len(pairs), width), 9, dtype=np.int64)
    ref = np.full((len(pairs), ref_width), 8, dtype=np.int64)
    for row, (h, r) in enumerate(pairs):
        hyp[row, : len(h)] = h
        ref[row, : len(r)] = r
    hyp_len = np.array([len(h) for h, _ in pairs], dtype=np.int64)
    ref_len = np.array([len(r) for _, r in pairs], dtype=np.int64)
    expected = [_levenshtein(r, h) for h, r in pairs]
    assert edit_distances(hyp, ref, hyp_len, ref_len).tolist() == expected


def test_cer_by_hand() -> None:
    """Two edits in four target characters: 50 %, weighted by the 4 characters."""
    metric = CharErrorRate()
    entry = metric.update(
        CerInput(torch.tensor([[1, 2], [3, 5]]), torch.tensor([[1, 3], [3, 4]])), META
    )
    assert entry.serialized == "50,4"
    assert metric.name == "CER" and WordErrorRate().name == "WER"
    assert metric.attributes.unit == "%" and not metric.attributes.higher_is_better


def test_sequences_end_at_their_first_pad_token() -> None:
    """With a pad token, tokens from the first pad on are not part of the sequence."""
    metric = CharErrorRate(pad_token=9)
    outputs = torch.tensor([[1, 2, 9, 7], [3, 5, 9, 9]])
    targets = torch.tensor([[1, 3, 9, 4], [3, 4, 9, 9]])  # the 4 after a pad does not count
    assert metric.update(CerInput(outputs, targets), META).serialized == "50,4"


def _text(tokens: list[int], pad: int | None, separator: str) -> str:
    if pad is not None and pad in tokens:
        tokens = tokens[: tokens.index(pad)]
    return separator.join("abcdef"[t] for t in tokens)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.integers(1, 6), st.integers(1, 6)), min_size=1, max_size=5
    ),
    st.booleans(),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_epoch_value_over_uneven_batches_matches_torchmetrics(
    batches: list[tuple[int, int, int]], words: bool, padded: bool, seed: int
) -> None:
    """The epoch value is the corpus rate of all batches, as torchmetrics gives it for the texts."""
    generator = torch.Generator().manual_seed(seed)
    pad = 5 if padded else None
    metric = WordErrorRate(pad_token=pad) if words else CharErrorRate(pad_token=pad)
    item = WerInput if words else CerInput
    separator = " " if words else ""
    predictions: list[str] = []
    references: list[str] = []
    for size, hyp_width, ref_width in batches:
        outputs = torch.randint(0, 6, (size, hyp_width), generator=generator)
        targets = torch.randint(0, 6 if padded else 5, (size, ref_width), generator=generator)
        targets[:, 0] = torch.randint(0, 5, (size,), generator=generator)  # never empty
        metric.update(item(outputs, targets), META)
        predictions += [_text(row, pad, separator) for row in outputs.tolist()]
        references += [_text(row, pad, separator) for row in targets.tolist()]
    metric.compute()
    rate = word_error_rate if words else char_error_rate
    expected = 100 * float(rate(predictions, references))
    assert metric.final_value().value == pytest.approx(expected)


def test_empty_targets_rate_zero_without_edits_and_inf_with() -> None:
    """No target tokens: 0 % if the prediction is empty too, else inf; the weight is 0."""
    metric = CharErrorRate(pad_token=0)
    assert metric.update(CerInput(torch.zeros(1, 2), torch.zeros(1, 2)), META).serialized == "0,0"
    assert metric.update(CerInput(torch.ones(1, 2), torch.zeros(1, 2)), META).serialized == "inf,0"


def test_pad_token_must_be_an_int() -> None:
    """pad_token is an int or None."""
    with pytest.raises(TypeError, match=r"pad_token must be an int or None, got 1\.0"):
        WordErrorRate(pad_token=1.0)  # type: ignore[arg-type]
