"""Tests for ember.data._rng: streams are pure functions of (seed, stream, epoch), and a
shuffled order is a permutation computed lazily, position by position."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import _rng as rng


def full_order(seed: int, stream: rng.Stream, epoch: int, n: int) -> list[int]:
    order: list[int] = rng.epoch_order(seed, stream, epoch, n).take(0, n).tolist()
    return order


@pytest.mark.parametrize("n", [100, rng.FULL_PERMUTATION_ITEMS + 100])
def test_shuffled_orders_are_pure_functions(n: int) -> None:
    """The same (seed, stream, epoch) gives the same order; other epochs and seeds differ."""
    first = full_order(7, rng.LOADER_STREAM, 1, n)
    assert first == full_order(7, rng.LOADER_STREAM, 1, n)
    assert sorted(first) == list(range(n))
    assert first != full_order(7, rng.LOADER_STREAM, 2, n)
    assert first != full_order(8, rng.LOADER_STREAM, 1, n)


def test_short_passes_keep_numpys_permutation_and_long_ones_are_lazy() -> None:
    """Up to 65,536 items a pass is numpy's permutation from (seed, stream, epoch), as ember
    always drew it (the batches did not change); beyond, the lazy Feistel order."""
    n = rng.FULL_PERMUTATION_ITEMS
    numpy_order = rng.generator(7, (*rng.LOADER_STREAM, 3)).permutation(n).tolist()
    assert full_order(7, rng.LOADER_STREAM, 3, n) == numpy_order
    assert isinstance(rng.epoch_order(7, rng.LOADER_STREAM, 3, n + 1), rng.FeistelOrder)


def test_slice_streams_are_distinct_from_parent_and_siblings() -> None:
    """A slice stream differs from its parent's and from other ranges'."""
    parent = rng.LOADER_STREAM
    streams = {parent, rng.slice_stream(parent, 0, 50), rng.slice_stream(parent, 50, 100)}
    assert len(streams) == 3
    orders = {tuple(full_order(1, s, 1, 50)) for s in streams}
    assert len(orders) == 3


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(1, 3000) | st.integers(1, 2**40),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(1, 10**6),
    data=st.data(),
)
def test_a_shuffled_order_is_a_permutation_taken_anywhere(
    n: int, seed: int, epoch: int, data: st.DataObject
) -> None:
    """For any n and seed the lazy order is a permutation of range(n) (checked whole for n up
    to 3000), and any window of positions equals that window of the whole order."""
    order = rng.FeistelOrder(seed, rng.LOADER_STREAM, epoch, n)
    low = data.draw(st.integers(0, n - 1))
    high = data.draw(st.integers(low, min(n, low + 300)))
    window = order.take(low, high)
    assert window.dtype == np.uint64 and len(window) == high - low
    assert int(window.max(initial=0)) < n
    assert len(set(window.tolist())) == high - low
    if n <= 3000:
        whole = order.take(0, n).tolist()
        assert sorted(whole) == list(range(n))
        assert window.tolist() == whole[low:high]


def test_a_shuffled_order_places_items_uniformly() -> None:
    """Over 4000 seeds, every item of a 23-item order lands at every position about equally
    often (chi-square within 5 standard deviations of its mean)."""
    n, seeds = 23, 4000
    counts = np.zeros((n, n))
    for seed in range(seeds):
        counts[np.arange(n), rng.FeistelOrder(seed, rng.LOADER_STREAM, 1, n).take(0, n)] += 1
    expected = seeds / n
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    dof = (n - 1) ** 2
    assert abs(chi2 - dof) < 5 * (2 * dof) ** 0.5


def test_bad_orders_and_positions_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one item, got n=0"):
        rng.FeistelOrder(1, rng.LOADER_STREAM, 1, 0)
    with pytest.raises(IndexError, match=r"positions 3\.\.12 out of range for an order of 10"):
        rng.FeistelOrder(1, rng.LOADER_STREAM, 1, 10).take(3, 12)
