"""Tests for ember.data._loader: BatchDataLoader's epochs, progress, to_device, slice, errors."""

from __future__ import annotations

import itertools
import random
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import BatchDataLoader, DataLoaderError, InMemDataset, Progress
from tests.data.helpers import Batch, batches_of, epochs_of, item_batcher

FAST = settings(max_examples=100, deadline=None)


def loader(n: int, batch_size: int = 1, seed: int | None = None) -> BatchDataLoader[int, Batch]:
    return BatchDataLoader(InMemDataset(range(n)), item_batcher, batch_size=batch_size, seed=seed)


@FAST
@given(n=st.integers(1, 80), batch_size=st.integers(1, 20), seed=st.none() | st.integers(0, 99))
def test_every_item_once_per_epoch_in_full_batches_and_one_short_tail(
    n: int, batch_size: int, seed: int | None
) -> None:
    """Each pass has ceil(n/b) batches, all of b items but the last, every item exactly once."""
    data = loader(n, batch_size, seed)
    assert len(data) == -(-n // batch_size)
    assert data.num_items() == n
    for _ in range(3):
        batches = batches_of(data)
        assert len(batches) == len(data)
        assert all(len(b) == batch_size for b in batches[:-1])
        assert 1 <= len(batches[-1]) <= batch_size
        assert sorted(x for b in batches for x in b) == list(range(n))
        if seed is None:
            assert [x for b in batches for x in b] == list(range(n))


def test_shuffled_epochs_differ_and_equal_seeds_agree() -> None:
    """Every epoch gets a new permutation; two loaders with the same seed yield the same run."""
    a, b, other = loader(30, 4, seed=7), loader(30, 4, seed=7), loader(30, 4, seed=8)
    run_a = [batches_of(a) for _ in range(4)]
    assert run_a == [batches_of(b) for _ in range(4)]
    assert len({str(epoch) for epoch in run_a}) == 4
    assert [batches_of(other) for _ in range(4)] != run_a


def test_batches_are_built_on_the_device_by_the_batcher() -> None:
    """The batcher is called once per batch with the loader's device."""
    data = BatchDataLoader([1, 2, 3], item_batcher, batch_size=2, device="meta")
    assert data.device == torch.device("meta")
    assert list(data) == [([1, 2], torch.device("meta")), ([3], torch.device("meta"))]


def test_progress_counts_items_including_the_batch_just_returned() -> None:
    """progress() after each batch: items so far out of num_items, complete at the end."""
    data = loader(10, 4)
    iterator = iter(data)
    assert iterator.progress() == Progress(0, 10, "items")
    seen = []
    for _ in iterator:
        seen.append(iterator.progress())
    assert [p.items_processed for p in seen] == [4, 8, 10]
    assert {p.items_total for p in seen} == {10}
    assert [p.is_completed for p in seen] == [False, False, True]


def test_a_new_pass_stops_the_previous_iterator() -> None:
    """Starting another iter() ends the unfinished pass: its iterator stops."""
    data = loader(6, 2)
    first = iter(data)
    next(first)
    second = iter(data)
    assert list(first) == []
    assert len(list(second)) == 3


def test_shuffling_leaves_global_random_states_alone() -> None:
    """The loader's RNG is private: torch, numpy and random global states are untouched."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    torch_state, numpy_state, python_state = (
        torch.get_rng_state(),
        np.random.get_state(legacy=False)["state"]["key"].copy(),
        random.getstate(),
    )
    data = loader(50, 8, seed=3)
    epochs_of(data, 3)
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert np.array_equal(np.random.get_state(legacy=False)["state"]["key"], numpy_state)
    assert random.getstate() == python_state


@FAST
@given(
    n=st.integers(1, 40),
    batch_size=st.integers(1, 8),
    seed=st.none() | st.integers(0, 99),
    epochs_before=st.integers(0, 3),
)
def test_to_device_keeps_the_batches_and_does_not_advance_the_original(
    n: int, batch_size: int, seed: int | None, epochs_before: int
) -> None:
    """A moved loader yields exactly the original's next epochs, on its device ("stable stream")."""
    original, twin = loader(n, batch_size, seed), loader(n, batch_size, seed)
    epochs_of(original, epochs_before)
    epochs_of(twin, epochs_before)
    moved = original.to_device("meta")
    assert moved.device == torch.device("meta")
    moved_batches = list(moved)
    assert {device for _, device in moved_batches} == {torch.device("meta")}
    expected = epochs_of(twin, 2)
    assert [items for items, _ in moved_batches] == expected[: len(twin)]
    # creating and iterating the moved loader did not advance the original
    assert batches_of(original) == expected[: len(twin)]


def test_to_device_mid_pass_continues_that_pass() -> None:
    """to_device of a loader in the middle of a pass yields the rest of that pass first."""
    data = loader(10, 3, seed=1)
    iterator = iter(data)
    first = next(iterator)[0]
    moved = data.to_device("cpu")
    rest = batches_of(moved)
    assert rest == batches_of(iterator)
    assert sorted([*first, *(x for b in rest for x in b)]) == list(range(10))


@FAST
@given(
    n=st.integers(2, 60),
    cuts=st.lists(st.integers(1, 59), max_size=4),
    batch_size=st.integers(1, 6),
    seed=st.integers(0, 99),
)
def test_slices_partition_the_unshuffled_data(
    n: int, cuts: list[int], batch_size: int, seed: int
) -> None:
    """Slices over consecutive ranges cover the dataset's items [start, end) exactly, each epoch."""
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    data = loader(n, batch_size, seed)
    for start, end in itertools.pairwise(bounds):
        part = data.slice(start, end)
        assert part.num_items() == end - start
        assert len(part) == -(-(end - start) // batch_size)
        for _ in range(2):
            assert sorted(x for b in batches_of(part) for x in b) == list(range(start, end))


def test_slices_have_independent_streams_starting_at_epoch_zero() -> None:
    """A slice's permutations differ from its parent's and siblings', and do not advance them."""
    data = loader(40, 40, seed=5)
    parent_first = batches_of(loader(40, 40, seed=5))
    a, b = data.slice(0, 20), data.slice(20, 40)
    offset = [[x - 20 for x in batch] for batch in batches_of(b)]
    assert batches_of(a) != offset
    whole = data.slice(0, 40)
    assert batches_of(whole) != parent_first
    assert batches_of(data) == parent_first  # slicing did not advance the parent
    assert batches_of(data.slice(0, 20)) == batches_of(loader(40, 40, seed=5).slice(0, 20))
    nested = data.slice(10, 30).slice(5, 10)
    assert sorted(batches_of(nested)[0]) == list(range(15, 20))


@pytest.mark.parametrize(
    ("start", "end", "message"),
    [
        (-1, 3, "got start=-1, end=3"),
        (
            3,
            3,
            r"slice needs 0 <= start < end <= 10 \(the loader's num_items\), got start=3, end=3",
        ),
        (4, 2, "got start=4, end=2"),
        (0, 11, "got start=0, end=11"),
    ],
)
def test_slice_rejects_bad_ranges(start: int, end: int, message: str) -> None:
    """A slice outside 0 <= start < end <= num_items names start, end and the length."""
    with pytest.raises(ValueError, match=message):
        loader(10).slice(start, end)


def test_dataset_error_reaches_the_consumer_and_ends_the_pass() -> None:
    """An exception from the dataset is raised by next() as itself; the pass then ends."""

    class Broken:
        def __getitem__(self, index: int) -> int:
            if index == 5:
                raise KeyError(index)
            return index

        def __len__(self) -> int:
            return 8

    data = BatchDataLoader(Broken(), item_batcher, batch_size=2)
    iterator = iter(data)
    assert batches_of([next(iterator), next(iterator)]) == [[0, 1], [2, 3]]
    with pytest.raises(KeyError):
        next(iterator)
    assert list(iterator) == []
    assert data.state_dict()["batches_consumed"] == 2


def test_closed_loader_cannot_be_iterated() -> None:
    """close() is idempotent, stops the live iterator, and a later iter() is a DataLoaderError."""
    with loader(4, 1) as data:
        iterator = iter(data)
        next(iterator)
    assert list(iterator) == []
    data.close()
    with pytest.raises(DataLoaderError, match="closed BatchDataLoader"):
        iter(data)
    assert len(batches_of(data.to_device("cpu").slice(0, 2))) == 2


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"batch_size": 0}, ValueError, "batch_size must be >= 1, got 0"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int, got 2.0"),
        ({"batch_size": True}, TypeError, "batch_size must be an int, got True"),
        ({"seed": -3}, ValueError, "seed must be >= 0, got -3"),
        ({"seed": "1"}, TypeError, "seed must be an int, got '1'"),
        ({"device": "nope"}, ValueError, "device is not a valid device: 'nope'"),
        ({"device": 0}, TypeError, "device must be a str or torch.device, got 0"),
    ],
)
def test_constructor_rejects_bad_arguments(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    """Bad constructor arguments are refused at the call, naming the argument and the value."""
    with pytest.raises(error, match=message):
        BatchDataLoader([1, 2], item_batcher, **kwargs)


def test_constructor_rejects_empty_dataset_and_bad_batcher() -> None:
    """An empty dataset is a ValueError; a batcher that cannot be called is a TypeError."""
    with pytest.raises(ValueError, match="dataset is empty"):
        BatchDataLoader([], item_batcher)
    with pytest.raises(TypeError, match="batcher must have a batch"):
        BatchDataLoader([1], 3)  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(TypeError, match="dataset must be a Dataset"):
        BatchDataLoader(3, item_batcher)  # type: ignore[arg-type]  # the wrong type is the test


def test_batcher_returning_none_fails_at_the_first_batch() -> None:
    """A batcher returning None is a TypeError naming it, raised when the first batch is built."""

    class Forgetful:
        def batch(self, items: list[int], device: torch.device) -> None:
            pass

        def __repr__(self) -> str:
            return "Forgetful()"

    data = BatchDataLoader([1, 2], Forgetful())
    with pytest.raises(TypeError, match=r"batcher Forgetful\(\) returned None .* only check"):
        next(iter(data))


def test_repr_shows_the_settings() -> None:
    """repr names the class and its settings."""
    assert repr(loader(5, 2, seed=3)) == (
        "BatchDataLoader(num_items=5, batch_size=2, seed=3, device='cpu', epoch=0)"
    )
