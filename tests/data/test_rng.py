"""Tests for ember.data._rng: streams are pure functions of (seed, stream, epoch)."""

from __future__ import annotations

import numpy as np

from ember.data import _rng as rng


def test_epoch_permutations_are_pure_functions() -> None:
    """The same (seed, stream, epoch) gives the same permutation; other epochs differ."""
    first = rng.epoch_permutation(7, rng.LOADER_STREAM, 1, 100)
    assert np.array_equal(first, rng.epoch_permutation(7, rng.LOADER_STREAM, 1, 100))
    assert sorted(first.tolist()) == list(range(100))
    assert not np.array_equal(first, rng.epoch_permutation(7, rng.LOADER_STREAM, 2, 100))
    assert not np.array_equal(first, rng.epoch_permutation(8, rng.LOADER_STREAM, 1, 100))


def test_slice_streams_are_distinct_from_parent_and_siblings() -> None:
    """A slice stream differs from its parent's and from other ranges'."""
    parent = rng.LOADER_STREAM
    streams = {parent, rng.slice_stream(parent, 0, 50), rng.slice_stream(parent, 50, 100)}
    assert len(streams) == 3
    perms = {tuple(rng.epoch_permutation(1, s, 1, 50).tolist()) for s in streams}
    assert len(perms) == 3
