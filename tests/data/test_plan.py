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
from ember.data._plan import EpochPlan
from tests.data.helpers import Batch, batches_of, item_batcher

PLANS = settings(max_examples=150, deadline=None)


def eager_plan(
    n: int, batch_size: int, seed: int | None, stream: tuple[int, ...], epoch: int, start: int = 0
) -> list[list[int]]:
    """The epoch plan as ember built it before plans were lazy (Python lists up front)."""
    if seed is None:
        order = np.arange(start, start + n)
    else:
        generator = np.random.Generator(
            np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(*stream, epoch)))
        )
        order = generator.permutation(n) + start
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


def test_an_epoch_plan_is_a_lazy_sequence() -> None:
    """len, indexing (negative too), slicing and bounds of a plan."""
    plan = EpochPlan(np.array([4, 2, 0, 1, 3]), 10, 5, 2)
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


def test_resuming_a_million_item_shuffled_epoch_reads_one_batch() -> None:
    """At item 500,000 of a 1,000,000-item shuffled pass, the next batch is read and no other."""
    original = BatchDataLoader(range(1_000_000), item_batcher, batch_size=100, seed=3)
    state: dict[str, Any] = {**original.state_dict(), "epoch": 1, "batches_consumed": 5_000}
    dataset = RecordingDataset(1_000_000)
    restored = BatchDataLoader(dataset, item_batcher, batch_size=100, seed=3)
    restored.load_state_dict(state)
    iterator = iter(restored)
    items, _ = next(iterator)
    assert iterator.progress().items_processed == 500_100
    assert dataset.read == set(items)
    assert items == original.epoch_plan(1)[5_000]


def test_a_state_in_the_documented_format_of_earlier_versions_resumes() -> None:
    """A state written before plans were lazy (the same format) resumes at its batch."""
    state = {
        "kind": "ember.data._loader",
        "version": 1,
        "num_items": 200,
        "batch_size": 32,
        "seed": 7,
        "stream": [0],
        "epoch": 3,
        "batches_consumed": 2,
    }
    loader = build(200, 32, 7, 2)
    loader.load_state_dict(state)
    with loader:
        assert batches_of(loader) == eager_plan(200, 32, 7, (0,), 3)[2:]
