"""Tests for ember.data._plan: lazy epoch plans equal the eager ones, and a resumed pass reads
nothing before its position."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import BatchDataLoader, DataLoaderBuilder, InMemDataset
from ember.data import _rng as rng
from ember.data._plan import BLOCK_ITEMS, EpochPlan
from tests.data.helpers import Batch, batches_of, item_batcher

PLANS = settings(max_examples=150, deadline=None)


def eager_plan(
    n: int, batch_size: int, seed: int | None, stream: tuple[int, ...], epoch: int, start: int = 0
) -> list[list[int]]:
    """The epoch plan built eagerly: the whole order, then every batch's index list."""
    if seed is None:
        order = np.arange(start, start + n)
    else:
        order = rng.epoch_order(seed, stream, epoch, n).take(0, n).astype(np.int64) + start
    full = n - n % batch_size
    batches: list[list[int]] = order[:full].reshape(-1, batch_size).tolist()
    if full < n:
        batches.append(order[full:].tolist())
    return batches


def build(
    n: int, batch_size: int, seed: int | None, workers: int, dataset: Any = None
) -> BatchDataLoader[int, Batch]:
    """A loader over ``dataset`` (default: the ints ``0 .. n-1``)."""
    builder = DataLoaderBuilder(item_batcher).batch_size(batch_size).num_workers(workers)
    if seed is not None:
        builder.shuffle(seed)
    return builder.build(InMemDataset(range(n)) if dataset is None else dataset)


@PLANS
@given(
    n=st.integers(1, 300),
    batch_size=st.integers(1, 40),
    seed=st.none() | st.integers(0, 2**32),
    epochs=st.integers(1, 3),
    workers=st.sampled_from([0, 1, 3]),
)
def test_lazy_plans_give_exactly_the_batches_of_the_eager_plans(
    n: int, batch_size: int, seed: int | None, epochs: int, workers: int
) -> None:
    """Same seeds, same batches: every epoch's plan and batches equal the eager plan's."""
    with build(n, batch_size, seed, workers) as loader:
        for epoch in range(1, epochs + 1):
            expected = eager_plan(n, batch_size, seed, (0,), epoch)
            assert list(loader.epoch_plan(epoch)) == expected
            assert batches_of(loader) == expected


@PLANS
@given(
    n=st.integers(2, 200),
    batch_size=st.integers(1, 17),
    seed=st.integers(0, 1000),
    data=st.data(),
)
def test_slice_plans_equal_the_eager_plans_of_their_range(
    n: int, batch_size: int, seed: int, data: st.DataObject
) -> None:
    """A slice's lazy plan is the eager plan of its range, shifted and on its own stream."""
    start = data.draw(st.integers(0, n - 1))
    end = data.draw(st.integers(start + 1, n))
    child = build(n, batch_size, seed, 0).slice(start, end)
    expected = eager_plan(end - start, batch_size, seed, (0, 1, start, end), 1, start)
    assert batches_of(child) == expected


class FixedOrder:
    """An order given as an array, counting the positions it is asked for."""

    def __init__(self, items: list[int]) -> None:
        self._items = np.array(items, dtype=np.uint64)
        self.taken = 0

    def __len__(self) -> int:
        return len(self._items)

    def take(self, low: int, high: int) -> np.ndarray:
        self.taken += high - low
        return self._items[low:high]


def test_an_epoch_plan_is_a_lazy_sequence() -> None:
    """len, indexing (negative too), slicing and bounds of a plan."""
    plan = EpochPlan(FixedOrder([4, 2, 0, 1, 3]), 10, 5, 2)
    assert len(plan) == 3
    assert plan[0] == [14, 12] and plan[-1] == [13]
    assert plan[1:] == [[10, 11], [13]]
    assert list(plan) == [[14, 12], [10, 11], [13]]
    assert [chunk.payload for chunk in plan.chunks(1)] == [[10, 11], [13]]
    assert [chunk.last for chunk in plan.chunks(0)] == [False, False, True]
    assert [chunk.start for chunk in plan.chunks(0)] == [0, 2, 4]
    with pytest.raises(IndexError, match="batch 3 out of range for a plan of 3 batches"):
        plan[3]
    assert EpochPlan(None, 3, 5, 2)[2] == [7]


def test_a_plan_evaluates_its_order_a_block_of_whole_batches_at_a_time() -> None:
    """Batch 0 of a 10-million-item plan takes one block of positions, and the batches of that
    block take nothing more; a batch far on takes its own block only."""
    batch_size = 100
    items = list(range(10_000_000))
    order = FixedOrder(items)
    plan = EpochPlan(order, 0, len(items), batch_size)
    per_block = BLOCK_ITEMS // batch_size * batch_size
    assert plan[0] == items[:batch_size]
    assert order.taken == per_block
    assert plan[per_block // batch_size - 1] == items[per_block - batch_size : per_block]
    assert order.taken == per_block
    assert plan[50_000] == items[5_000_000:5_000_100]
    assert order.taken == 2 * per_block


class RecordingDataset:
    """A dataset of ``n`` ints that records which indexes were read (from any thread)."""

    def __init__(self, n: int) -> None:
        self._n = n
        self._lock = threading.Lock()
        self.read: set[int] = set()

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: int) -> int:
        with self._lock:
            self.read.add(index)
        return index


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 120),
    batch_size=st.integers(1, 9),
    seed=st.none() | st.integers(0, 1000),
    data=st.data(),
    workers=st.sampled_from([0, 1, 3]),
)
def test_a_resumed_pass_reads_only_the_items_from_its_position_on(
    n: int, batch_size: int, seed: int | None, data: st.DataObject, workers: int
) -> None:
    """Resuming after k batches continues with batch k+1 and never reads an earlier batch's
    items: the permutation and the position are the state."""
    original = build(n, batch_size, seed, 0)
    batches = -(-n // batch_size)
    taken = data.draw(st.integers(0, batches - 1))
    iterator = iter(original)
    for _ in range(taken):
        next(iterator)
    state = original.state_dict()
    rest = batches_of(iterator)
    dataset = RecordingDataset(n)
    restored = build(n, batch_size, seed, workers, dataset)
    with restored:
        restored.load_state_dict(state)
        assert batches_of(restored) == rest
    assert dataset.read == {index for batch in rest for index in batch}


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_resuming_a_ten_million_item_shuffled_epoch_reads_one_batch(workers: int) -> None:
    """At item 5,000,000 of a 10,000,000-item shuffled pass, the next batches are the original
    loader's, whatever the number of worker threads, and only their items are read."""
    original = BatchDataLoader(range(10_000_000), item_batcher, batch_size=100, seed=3)
    state: dict[str, Any] = {**original.state_dict(), "epoch": 1, "batches_consumed": 50_000}
    dataset = RecordingDataset(10_000_000)
    restored = build(10_000_000, 100, 3, workers, dataset)
    with restored:
        restored.load_state_dict(state)
        iterator = iter(restored)
        items, _ = next(iterator)
        assert iterator.progress().items_processed == 5_000_100
        assert items == original.epoch_plan(1)[50_000]
        assert next(iterator)[0] == original.epoch_plan(1)[50_001]
    plan = original.epoch_plan(1)
    prefetched = set(range(50_000, 50_000 + 2 + 2 * workers))  # what worker threads built ahead
    assert set(items) <= dataset.read <= {i for j in prefetched for i in plan[j]}


OLD_STATE = {
    "kind": "ember.data._loader",
    "version": 1,
    "num_items": 200,
    "batch_size": 32,
    "seed": 7,
    "stream": [0],
    "epoch": 3,
    "batches_consumed": 2,
}
"""A state as an ember before the lazy order wrote it (version 1)."""


@pytest.mark.parametrize("workers", [0, 2])
def test_older_states_of_passes_whose_order_did_not_change_resume(workers: int) -> None:
    """A version-1 state of a pass of at most 65,536 items (still numpy's permutation, as
    before) resumes mid-pass with the batches it began with; so does an unshuffled one."""
    loader = build(200, 32, 7, workers)
    with loader:
        loader.load_state_dict(OLD_STATE)
        assert batches_of(loader) == eager_plan(200, 32, 7, (0,), 3)[2:]
    plain = build(200, 32, None, workers)
    with plain:
        plain.load_state_dict({**OLD_STATE, "seed": None})
        assert batches_of(plain) == eager_plan(200, 32, None, (0,), 3)[2:]


def test_an_older_state_in_the_middle_of_a_long_shuffled_pass_is_refused() -> None:
    """A pass of more than 65,536 items followed another order before: a version-1 state left
    in its middle cannot go on with the batches it began with; at the pass's end it loads."""
    n = rng.FULL_PERMUTATION_ITEMS + 1
    state = {**OLD_STATE, "num_items": n}
    loader = BatchDataLoader(range(n), item_batcher, batch_size=32, seed=7)
    with pytest.raises(ValueError, match=r"older ember \(state version 1\) in the middle"):
        loader.load_state_dict(state)
    loader.load_state_dict({**state, "batches_consumed": len(loader)})  # pass 3 complete
    assert next(iter(loader))[0] == loader.epoch_plan(4)[0]


def test_a_state_of_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="its version is 9; this ember reads versions 1 and 2"):
        build(200, 32, 7, 0).load_state_dict({**OLD_STATE, "version": 9})


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(rng.FULL_PERMUTATION_ITEMS + 1, 3 * rng.FULL_PERMUTATION_ITEMS),
    batch_size=st.integers(1, 700),
    seed=st.integers(0, 2**63),
    data=st.data(),
)
def test_a_long_pass_lazy_order_gives_the_same_batches_for_any_worker_count(
    n: int, batch_size: int, seed: int, data: st.DataObject
) -> None:
    """A pass long enough for the lazy order, resumed at any batch: 0, 1 and 3 worker threads
    yield the batches of its plan, which are slices of one permutation of the items."""
    plan = BatchDataLoader(range(n), item_batcher, batch_size=batch_size, seed=seed).epoch_plan(2)
    first = data.draw(st.integers(0, len(plan) - 1))
    expected = plan[first : first + 3]
    seen = [index for batch in plan[first : first + 3] for index in batch]
    assert len(set(seen)) == len(seen) and all(0 <= index < n for index in seen)
    for workers in (0, 1, 3):
        loader = build(n, batch_size, seed, workers)
        with loader:
            state = {**loader.state_dict(), "epoch": 2, "batches_consumed": first}
            loader.load_state_dict(state)
            iterator = iter(loader)
            got = [next(iterator)[0] for _ in range(len(expected))]
        assert got == expected, workers
