"""Tests for ember.data._stream: streaming sources read once per pass, batched by the same
batcher on any number of threads, shuffled through a seeded buffer, sharded, resumed."""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import (
    DataLoaderBuilder,
    DataLoaderError,
    ShardedDataLoader,
    StatefulSource,
    StreamingDataLoader,
)
from ember.data._stream import buffer_shuffle, structure
from tests.data.helpers import Batch, assert_threads_exit, batches_of, epochs_of, item_batcher

STREAMS = settings(max_examples=60, deadline=None)
WORKERS = st.sampled_from([0, 1, 3])


class Counting(torch.utils.data.IterableDataset[int]):
    """The ints ``0 .. n-1``, recording how many were read and on which threads."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.read = 0
        self.threads: set[str] = set()

    def __iter__(self) -> Iterator[int]:
        for item in range(self.n):
            self.read += 1
            self.threads.add(threading.current_thread().name)
            yield item


class Stateful(Counting):
    """A ``Counting`` source with its own state: where its next ``iter()`` starts."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.position = 0

    def __iter__(self) -> Iterator[int]:
        start, self.position = self.position, self.position
        for item in range(start, self.n):
            self.read += 1
            self.position = item + 1
            yield item

    def state_dict(self) -> dict[str, Any]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = state["position"]


def streaming(
    source: Any,
    batch_size: int,
    workers: int = 0,
    seed: int | None = None,
    buffer_size: int | None = None,
) -> StreamingDataLoader[int, Batch]:
    builder = DataLoaderBuilder(item_batcher).batch_size(batch_size).num_workers(workers)
    if seed is not None:
        builder.shuffle(seed, buffer_size=buffer_size)
    loader: StreamingDataLoader[int, Batch] = builder.build(source)
    return loader


def through_json(state: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(state))
    return result


def flat(batches: list[list[int]]) -> list[int]:
    return [item for batch in batches for item in batch]


@STREAMS
@given(
    n=st.integers(1, 60),
    batch_size=st.integers(1, 8),
    workers=WORKERS,
    kind=st.sampled_from(["iterable", "factory"]),
)
def test_every_item_once_per_pass_in_order_in_full_batches(
    n: int, batch_size: int, workers: int, kind: str
) -> None:
    """Each pass reads the source again and yields its items once, in order, in batches of
    batch_size but a shorter last one; items are read on the consumer's thread only."""
    source = Counting(n)
    with streaming(source if kind == "iterable" else source.__iter__, batch_size, workers) as data:
        for _ in range(2):
            batches = batches_of(data)
            assert flat(batches) == list(range(n))
            assert all(len(batch) == batch_size for batch in batches[:-1])
            assert 1 <= len(batches[-1]) <= batch_size
    assert source.threads == {threading.current_thread().name}


@STREAMS
@given(
    n=st.integers(1, 50),
    batch_size=st.integers(1, 6),
    seed=st.integers(0, 1000),
    buffer_size=st.integers(1, 70),
)
def test_the_same_shuffled_batches_for_any_worker_count(
    n: int, batch_size: int, seed: int, buffer_size: int
) -> None:
    """The batches depend on the seed and the source, never on the number of workers."""
    runs = []
    for workers in (0, 1, 3):
        with streaming(Counting(n), batch_size, workers, seed, buffer_size) as data:
            runs.append(epochs_of(data, 2))
    assert runs[0] == runs[1] == runs[2]
    assert sorted(flat(runs[0])) == sorted(list(range(n)) * 2)


@STREAMS
@given(
    n=st.integers(0, 80), size=st.integers(1, 30), seed=st.integers(0, 100), epoch=st.integers(1, 3)
)
def test_the_buffer_shuffle_keeps_its_documented_guarantee(
    n: int, size: int, seed: int, epoch: int
) -> None:
    """A permutation of the items, reproducible from (seed, stream), where item i comes out at
    position i - size + 1 or later."""
    out = list(buffer_shuffle(iter(range(n)), size, seed, (0, epoch)))
    assert sorted(out) == list(range(n))
    assert out == list(buffer_shuffle(iter(range(n)), size, seed, (0, epoch)))
    for position, item in enumerate(out):
        assert position >= item - size + 1


def test_shuffled_passes_differ_and_a_large_buffer_shuffles_everything() -> None:
    """Every epoch gets new draws; with a buffer as large as the pass any order can come out."""
    with streaming(Counting(40), 40, seed=5, buffer_size=40) as data:
        first, second = batches_of(data), batches_of(data)
    assert first != second and sorted(first[0]) == sorted(second[0]) == list(range(40))
    assert first[0][0] > 0 or first[0][-1] < 39  # moved, not just rotated through a tiny buffer


@STREAMS
@given(n=st.integers(1, 40), batch_size=st.integers(1, 7), workers=WORKERS)
def test_progress_has_no_total_until_the_last_batch(n: int, batch_size: int, workers: int) -> None:
    """items_total is None until the last batch, which is_completed; counts are exact."""
    with streaming(Counting(n), batch_size, workers) as data:
        iterator = iter(data)
        progress = [iterator.progress() for _ in iterator]
    assert [p.items_processed for p in progress][-1] == n
    assert [p.is_completed for p in progress] == [False] * (len(progress) - 1) + [True]
    assert [p.items_total for p in progress] == [None] * (len(progress) - 1) + [n]
    assert data.num_items() is None  # type: ignore[func-returns-value]  # the point here
    with pytest.raises(TypeError, match="no len"):
        len(data)


@STREAMS
@given(
    n=st.integers(1, 50),
    batch_size=st.integers(1, 7),
    workers=WORKERS,
    shuffled=st.booleans(),
)
def test_two_ranks_share_every_global_batch_disjointly(
    n: int, batch_size: int, workers: int, shuffled: bool
) -> None:
    """Two ShardedDataLoader views of a stream: each global batch is split between the ranks,
    every item is seen exactly once per pass, both ranks see the same number of entries and
    both complete on the last one."""
    seed, buffer = (3, 8) if shuffled else (None, None)
    data = streaming(Counting(n), batch_size, workers, seed, buffer)
    expected = batches_of(streaming(Counting(n), batch_size, 0, seed, buffer))
    views = [ShardedDataLoader(data, rank, 2) for rank in range(2)]
    shares: list[list[tuple[Any, tuple[int, ...]]]] = []
    for view in views:
        iterator = iter(view)
        shares.append([])
        for batch in iterator:
            shares[-1].append((batch, iterator.shares))
        assert iterator.progress().is_completed
        view.close()
    assert len(shares[0]) == len(shares[1]) == len(expected)
    for (zero, sizes), (one, _), whole in zip(shares[0], shares[1], expected, strict=True):
        joined = (zero[0] if zero else []) + (one[0] if one else [])
        assert joined == whole and sum(sizes) == len(whole)


@STREAMS
@given(
    n=st.integers(1, 40),
    batch_size=st.integers(1, 6),
    shuffled=st.booleans(),
    workers=st.sampled_from([(0, 0), (0, 3), (1, 0)]),
    data=st.data(),
)
def test_a_source_without_state_resumes_by_skipping_with_a_warning(
    n: int,
    batch_size: int,
    shuffled: bool,
    workers: tuple[int, int],
    data: st.DataObject,
) -> None:
    """A state saved after k batches continues with batch k+1 exactly (across worker counts,
    through JSON), after warning how many items are read again and skipped."""
    seed, buffer = (9, 5) if shuffled else (None, None)
    original = streaming(Counting(n), batch_size, workers[0], seed, buffer)
    batches_of(original)  # one finished pass: the resume is in epoch 2
    iterator = iter(original)
    taken = data.draw(st.integers(0, -(-n // batch_size) - 1))
    for _ in range(taken):
        next(iterator)
    state = through_json(original.state_dict())
    expected = batches_of(iterator) + batches_of(original)
    original.close()
    with streaming(Counting(n), batch_size, workers[1], seed, buffer) as restored:
        restored.load_state_dict(state)
        if taken:
            with pytest.warns(UserWarning, match=f"the first {taken * batch_size} items"):
                resumed = iter(restored)
        else:
            resumed = iter(restored)
        assert [items for items, _ in resumed] + batches_of(restored) == expected


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_source_resumes_from_its_own_state(workers: int) -> None:
    """A source with state_dict/load_state_dict resumes where the last batch's items ended,
    without reading the items before (no warning), and later passes start at its origin."""
    original = streaming(Stateful(20), 3, workers)
    iterator = iter(original)
    taken = [next(iterator)[0] for _ in range(4)]
    state = through_json(original.state_dict())
    assert state["source_state"] == {"position": 12}
    original.close()
    source = Stateful(20)
    with streaming(source, 3, workers) as restored:
        restored.load_state_dict(state)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            rest = batches_of(restored)
        assert flat(taken + rest) == list(range(20))
        assert source.read == 8
        assert flat(batches_of(restored)) == list(range(20))  # the next pass from the start


def test_a_pass_resumed_at_its_start_or_after_its_end_needs_no_skipping() -> None:
    """States taken before any batch, or after a finished pass, start a pass from the start."""
    data = streaming(Counting(7), 3)
    fresh = through_json(data.state_dict())
    batches_of(data)
    ended = through_json(data.state_dict())
    assert ended["pass_ended"] is True
    for state in (fresh, ended):
        restored = streaming(Counting(7), 3)
        restored.load_state_dict(state)
        assert batches_of(restored) == [[0, 1, 2], [3, 4, 5], [6]]


def test_hugging_face_iterable_datasets_stream_and_resume_from_their_own_state() -> None:
    """A datasets.IterableDataset (built in memory, nothing downloaded) streams dict items and
    resumes from its own state_dict, with 0 and 2 workers, without a skipping warning."""
    datasets = pytest.importorskip("datasets", reason="needs the hf extra: pip install datasets")

    def source() -> Any:
        return datasets.Dataset.from_dict({"x": list(range(23))}).to_iterable_dataset(num_shards=2)

    assert isinstance(source(), StatefulSource)
    expected = batches_of(streaming(source(), 4))
    rows: list[list[Any]] = expected  # the HF rows are dicts
    assert [item["x"] for batch in rows for item in batch] == list(range(23))
    for workers in (0, 2):
        original = streaming(source(), 4, workers)
        iterator = iter(original)
        taken = [next(iterator)[0] for _ in range(3)]
        state = through_json(original.state_dict())
        original.close()
        with streaming(source(), 4, workers) as restored:
            restored.load_state_dict(state)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                rest = batches_of(restored)
            assert taken + rest == expected
            assert batches_of(restored) == expected


def test_items_of_another_structure_fail_at_their_batch_naming_the_index() -> None:
    """The first item whose structure differs stops the pass at its batch, after the batches
    before it, with an error naming its index and both structures."""

    def items() -> Iterator[Any]:
        yield from ({"x": torch.tensor([i]), "y": i} for i in range(5))
        yield {"x": torch.tensor([5.0]), "y": 5}

    for workers in (0, 2):
        with streaming(items, 2, workers) as data:
            iterator = iter(data)
            assert len(next(iterator)[0]) == 2
            assert len(next(iterator)[0]) == 2
            with pytest.raises(DataLoaderError, match=r"item 5 .* Tensor\[float32\].* item 0"):
                next(iterator)


_leaves = st.sampled_from(
    [0, 1.5, "a", None, torch.zeros(2), torch.zeros(3, dtype=torch.int64), [1], (1,)]
)
_items = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.tuples(inner, inner),
        st.dictionaries(st.sampled_from(["x", "y", 1, 1.0]), inner, max_size=2),
    ),
    max_leaves=5,
)


@given(st.lists(_items, min_size=1, max_size=6))
@settings(max_examples=150, deadline=None)
def test_a_pass_refuses_exactly_the_first_item_whose_description_differs(items: list[Any]) -> None:
    """The pass stops at the first item whose structure() text differs from the first item's,
    and at no other: comparing outlines first never refuses an item the text would accept."""
    expected = next(
        (i for i, item in enumerate(items) if structure(item) != structure(items[0])), None
    )
    with streaming(lambda: iter(items), 1, 0) as data:
        iterator = iter(data)
        for index in range(len(items) if expected is None else expected):
            assert next(iterator)[0][0] is items[index]
        if expected is not None:
            with pytest.raises(DataLoaderError, match=rf"item {expected} "):
                next(iterator)


def test_structure_describes_containers_keys_and_dtypes_not_sizes() -> None:
    assert structure({"a": (1, torch.zeros(3))}) == "dict{a: tuple(int, Tensor[float32])}"
    assert structure([1, 2]) == structure([1, 2, 3]) == "list"


def test_an_error_of_the_source_reaches_the_consumer_at_its_batch() -> None:
    """A source raising at item 4 yields the full batches before it, then the error."""

    def items() -> Iterator[int]:
        yield from range(4)
        raise KeyError("bad record")

    for workers in (0, 2):
        with streaming(items, 2, workers) as data:
            iterator = iter(data)
            assert [next(iterator)[0], next(iterator)[0]] == [[0, 1], [2, 3]]
            with pytest.raises(KeyError, match="bad record"):
                next(iterator)


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        (iter(range(3)), TypeError, "can be read only once: pass a function"),
        (42, TypeError, "source must be a Dataset"),
    ],
)
def test_bad_sources_are_refused_at_build(source: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        DataLoaderBuilder(item_batcher).build(source)


def test_shuffle_needs_a_buffer_for_a_stream_and_none_for_a_dataset() -> None:
    """shuffle(seed) alone on a stream, or with buffer_size on a dataset, names the fix."""
    with pytest.raises(ValueError, match=r"needs a buffer size: call shuffle\(3, buffer_size=N\)"):
        DataLoaderBuilder(item_batcher).shuffle(3).build(Counting(4))
    with pytest.raises(ValueError, match=r"call shuffle\(seed\) without buffer_size"):
        DataLoaderBuilder(item_batcher).shuffle(3, buffer_size=8).build([1, 2])
    with pytest.raises(ValueError, match="buffer_size must be >= 1"):
        DataLoaderBuilder(item_batcher).shuffle(3, buffer_size=0)
    with pytest.raises(ValueError, match="give the seed and the buffer size together"):
        StreamingDataLoader(Counting(4), item_batcher, buffer_size=4)


def test_a_factory_returning_no_iterator_and_an_empty_stream_fail_at_the_first_batch() -> None:
    lists: Callable[[], Any] = lambda: [1, 2]  # noqa: E731  # the mistake under test
    with pytest.raises(TypeError, match="returned list, not an iterator"):
        next(iter(streaming(lists, 2)))
    with pytest.raises(DataLoaderError, match="yielded no items in epoch 1"):
        next(iter(streaming(Counting(0), 2)))


def test_to_device_continues_the_pass_and_slice_is_refused() -> None:
    data = streaming(Counting(9), 2)
    iterator = iter(data)
    next(iterator)
    moved = data.to_device("cpu")
    with pytest.warns(UserWarning, match="the first 2 items of the pass will be read again"):
        assert batches_of(moved) == [[2, 3], [4, 5], [6, 7], [8]]
    with pytest.raises(DataLoaderError, match="cannot be sliced"):
        data.slice(0, 4)


def test_a_state_of_another_loader_is_refused_naming_the_field() -> None:
    state = streaming(Counting(4), 2).state_dict()
    with pytest.raises(ValueError, match="batch_size is 2 in the state but 3"):
        streaming(Counting(4), 3).load_state_dict(state)
    with pytest.raises(ValueError, match="kind"):
        streaming(Counting(4), 2).load_state_dict({**state, "kind": "ember.data._loader"})


def test_dropping_a_threaded_stream_mid_pass_stops_its_threads(
    thread_baseline: set[threading.Thread],
) -> None:
    """A streaming loader with workers, left mid-pass and no longer referenced, stops its
    threads (its plan holds the source, not the loader)."""
    data = streaming(Stateful(100), 3, workers=2)
    for _ in data:
        break
    assert len([t for t in threading.enumerate() if t.name.startswith("dataloader-")]) == 2
    del data
    assert_threads_exit(thread_baseline)


@pytest.mark.parametrize("rank", [0, 1])
def test_a_rank_view_of_a_stream_resumes_from_any_rank_state(rank: int) -> None:
    """A state saved by rank 0's view mid-pass restores either rank's view at the next global
    batch (from the source's own state)."""
    saved = ShardedDataLoader(streaming(Stateful(11), 4), 0, 2)
    iterator = iter(saved)
    next(iterator)
    state = through_json(saved.state_dict())
    restored = ShardedDataLoader(streaming(Stateful(11), 4, workers=2), rank, 2)
    restored.load_state_dict(state)
    with restored:
        assert [batch[0] if batch else None for batch in restored] == (
            [[4, 5], [8, 9]] if rank == 0 else [[6, 7], [10]]
        )
