"""Tests for ember.data._multithread: same batches as BatchDataLoader, bounded prefetch, errors
and thread lifecycle."""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import BatchDataLoader, InMemDataset, MultiThreadDataLoader
from tests.data.helpers import Batch, assert_threads_exit, batches_of, epochs_of, item_batcher

THREADS = settings(max_examples=80, deadline=None)


def threaded(
    dataset: Any, workers: int, batch_size: int = 1, seed: int | None = None, **kwargs: Any
) -> MultiThreadDataLoader[int, Batch]:
    return MultiThreadDataLoader(
        dataset, item_batcher, num_workers=workers, batch_size=batch_size, seed=seed, **kwargs
    )


def worker_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("dataloader-")]


@THREADS
@given(
    n=st.integers(1, 60),
    batch_size=st.integers(1, 8),
    workers=st.integers(1, 3),
    seed=st.none() | st.integers(0, 2**32),
)
def test_batches_equal_the_single_thread_loader(
    n: int, batch_size: int, workers: int, seed: int | None
) -> None:
    """For 1, 2 and 3 workers the batch sequence over several epochs is BatchDataLoader's."""
    dataset = InMemDataset(range(n))
    single = BatchDataLoader(dataset, item_batcher, batch_size=batch_size, seed=seed)
    with threaded(dataset, workers, batch_size, seed) as multi:
        assert epochs_of(multi, 3) == epochs_of(single, 3)


def test_threads_are_named_started_lazily_and_reused(thread_baseline: set[Any]) -> None:
    """Threads dataloader-i start at the first iter(), serve every epoch, and end on close()."""
    data = threaded(list(range(10)), 3, batch_size=2)
    assert worker_threads() == []
    batches_of(data)
    first = set(worker_threads())
    assert sorted(t.name for t in first) == ["dataloader-0", "dataloader-1", "dataloader-2"]
    assert all(t.daemon for t in first)
    batches_of(data)
    assert set(worker_threads()) == first
    data.close()
    assert_threads_exit(thread_baseline)


def test_prefetch_builds_ahead_but_never_more_than_prefetch_batches() -> None:
    """Batches are built while the consumer works, at most ``prefetch`` ahead of it."""
    prefetch = 3
    consumed = 0
    ahead: list[int] = []
    lock = threading.Lock()
    built_ahead = threading.Event()

    def batcher(items: list[int], device: torch.device) -> int:
        (index,) = items
        with lock:
            ahead.append(index - consumed)
        if index == prefetch:
            built_ahead.set()
        return index

    with MultiThreadDataLoader(list(range(40)), batcher, num_workers=2, prefetch=prefetch) as data:
        iterator = iter(data)
        assert next(iterator) == 0
        with lock:
            consumed = 1
        # batch `prefetch` is only submitted once batch 0 was taken; it is built without the
        # consumer asking for it
        assert built_ahead.wait(5.0)
        for expected, batch in enumerate(iterator, start=1):
            assert batch == expected
            with lock:
                consumed += 1
    assert max(ahead) <= prefetch


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("where", ["dataset", "batcher"])
def test_worker_error_reaches_the_consumer_once_with_its_traceback(
    workers: int, where: str, thread_baseline: set[Any]
) -> None:
    """A worker's error is raised once, as itself, with its frames; then the threads exit."""

    class BoomError(Exception):
        pass

    class Dataset:
        def __getitem__(self, index: int) -> int:
            if where == "dataset" and index == 9:
                raise BoomError("bad item")
            return index

        def __len__(self) -> int:
            return 20

    def batcher(items: list[int], device: torch.device) -> list[int]:
        if where == "batcher" and 9 in items:
            raise BoomError("bad batch")
        return items

    data = MultiThreadDataLoader(Dataset(), batcher, num_workers=workers, batch_size=2)
    iterator = iter(data)
    assert [next(iterator) for _ in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    start = time.monotonic()
    with pytest.raises(BoomError) as caught:
        next(iterator)
    assert time.monotonic() - start < 1.0  # a generous bound, not a speed test
    frames = [frame.name for frame in traceback.extract_tb(caught.value.__traceback__)]
    assert ("__getitem__" if where == "dataset" else "batcher") in frames
    assert "_run_one" in frames  # the worker thread's frame
    (note,) = caught.value.__notes__
    assert "dataloader-" in note
    assert "batch 4 of epoch 1" in note
    assert list(iterator) == []  # exactly once: the pass is over
    assert_threads_exit(thread_baseline)
    # the loader still works: a new pass starts new threads and hits the same error at batch 4
    assert next(iter(data)) == [0, 1]
    data.close()


def test_breaking_early_then_closing_stops_every_thread(thread_baseline: set[Any]) -> None:
    """Leaving a pass early and closing the loader ends all worker threads."""
    data = threaded(list(range(100)), 2, batch_size=3)
    for _ in data:
        break
    data.close()
    assert worker_threads() == []


def test_breaking_early_then_dropping_the_loader_stops_every_thread(
    thread_baseline: set[Any],
) -> None:
    """A loader that is no longer referenced stops its threads (no close() needed)."""
    data = threaded(list(range(100)), 2, batch_size=3)
    for _ in data:
        break
    assert len(worker_threads()) == 2
    del data
    assert_threads_exit(thread_baseline)


def test_a_new_pass_cancels_the_unfinished_one() -> None:
    """A new iter() stops the previous iterator and yields the next epoch in full."""
    dataset = list(range(30))
    single = BatchDataLoader(dataset, item_batcher, batch_size=4, seed=2)
    with threaded(dataset, 2, batch_size=4, seed=2) as data:
        first = iter(data)
        next(first)
        assert batches_of(data) == epochs_of(single, 2)[len(single) :]
        assert list(first) == []


def test_close_stops_the_live_iterator_and_is_idempotent(thread_baseline: set[Any]) -> None:
    """close() in the middle of a pass ends that pass; closing again is harmless."""
    data = threaded(list(range(50)), 2)
    iterator = iter(data)
    next(iterator)
    data.close()
    data.close()
    assert list(iterator) == []


def test_constructor_checks_workers_and_prefetch() -> None:
    """num_workers and prefetch must be >= 1, named in the error."""
    with pytest.raises(ValueError, match="num_workers must be >= 1, got 0"):
        threaded([1], 0)
    with pytest.raises(ValueError, match="prefetch must be >= 1, got 0"):
        threaded([1], 1, prefetch=0)
    with pytest.raises(TypeError, match="num_workers must be an int"):
        threaded([1], 1.0)  # type: ignore[arg-type]  # the wrong type is the test


def test_to_device_and_slice_keep_the_worker_settings() -> None:
    """Derived loaders are multi-threaded too, with the same workers and the same batches."""
    dataset = list(range(12))
    with threaded(dataset, 2, batch_size=5, seed=4, prefetch=1) as data:
        moved = data.to_device("meta")
        part = data.slice(2, 9)
        assert "num_workers=2" in repr(moved)
        assert isinstance(part, MultiThreadDataLoader)
        single = BatchDataLoader(dataset, item_batcher, batch_size=5, seed=4)
        assert batches_of(moved) == batches_of(single)
        assert batches_of(part) == batches_of(single.slice(2, 9))
        moved.close()
        part.close()
