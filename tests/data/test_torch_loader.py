"""Tests for ember.data._torch_loader: a torch DataLoader behind ember's DataLoader protocol."""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, SequentialSampler, TensorDataset

from ember.data import DataLoaderError, TorchDataLoader
from tests.data.helpers import JOIN_TIMEOUT_S


def numbers(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def items(loader: Any) -> list[list[int]]:
    """The items of every batch of one pass."""
    return [batch.tolist() for (batch,) in loader]


def shuffled(n: int, seed: int, batch_size: int = 3) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(numbers(n), batch_size=batch_size, shuffle=True, generator=generator)


def test_batches_progress_and_sizes_come_from_the_torch_loader() -> None:
    """Iteration yields torch's batches; num_items, len and progress follow its dataset."""
    data: TorchDataLoader[Any] = TorchDataLoader(DataLoader(numbers(10), batch_size=4))
    assert (data.num_items(), len(data), data.device) == (10, 3, torch.device("cpu"))
    iterator = iter(data)
    assert iterator.progress().items_processed == 0
    processed = []
    for _ in iterator:
        processed.append(iterator.progress())
    assert [p.items_processed for p in processed] == [4, 8, 10]
    assert processed[-1].is_completed
    assert items(data) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_the_last_batch_completes_a_pass_that_drops_its_tail() -> None:
    """With drop_last the final batch still completes the progress."""
    data: TorchDataLoader[Any] = TorchDataLoader(
        DataLoader(numbers(10), batch_size=4, drop_last=True)
    )
    iterator = iter(data)
    assert [iterator.progress().items_processed for _ in iterator] == [4, 10]


def test_to_device_moves_every_tensor() -> None:
    """A loader moved to a device puts each batch's tensors there, continuing the same epochs."""
    data: TorchDataLoader[Any] = TorchDataLoader(DataLoader(numbers(4), batch_size=2))
    moved = data.to_device("meta")
    assert moved.device == torch.device("meta")
    assert [batch.device for (batch,) in moved] == [torch.device("meta")] * 2


def test_slice_rebuilds_the_loader_over_a_subset() -> None:
    """slice(start, end) reads items [start, end) with the same batch size and shuffling."""
    plain: TorchDataLoader[Any] = TorchDataLoader(DataLoader(numbers(10), batch_size=3))
    assert items(plain.slice(2, 8)) == [[2, 3, 4], [5, 6, 7]]
    part: TorchDataLoader[Any] = TorchDataLoader(shuffled(20, seed=0)).slice(5, 15)
    assert part.num_items() == 10
    first = items(part)
    assert sorted(x for batch in first for x in batch) == list(range(5, 15))
    assert items(TorchDataLoader(shuffled(20, seed=0)).slice(5, 15)) == first
    with pytest.raises(ValueError, match="got start=3, end=3"):
        plain.slice(3, 3)


def test_slice_of_a_custom_sampler_is_refused() -> None:
    """A torch loader with its own sampler cannot be rebuilt: DataLoaderError says why."""
    custom = DataLoader(numbers(6), sampler=list(range(5, -1, -1)), batch_size=2)
    with pytest.raises(DataLoaderError, match="custom sampler"):
        TorchDataLoader(custom).slice(0, 3)
    sequential = DataLoader(numbers(6), sampler=SequentialSampler(range(6)), batch_size=2)
    assert items(TorchDataLoader(sequential).slice(0, 4)) == [[0, 1], [2, 3]]


@pytest.mark.parametrize("consumed", [0, 2, 7])
def test_state_with_a_generator_restores_the_batch_order(consumed: int) -> None:
    """With a generator the state restores the batch order, mid-pass or between epochs."""
    original: TorchDataLoader[Any] = TorchDataLoader(shuffled(20, seed=1))
    items(original)
    iterator = iter(original)
    for _ in range(consumed):
        next(iterator)
    state = json.loads(json.dumps(original.state_dict()))
    assert state["epoch"] == 2
    assert state["batches_consumed"] == consumed
    expected = [b.tolist() for (b,) in iterator] + items(original)
    restored: TorchDataLoader[Any] = TorchDataLoader(shuffled(20, seed=99))
    restored.load_state_dict(state)
    produced = items(restored) if consumed < len(restored) else []
    produced += items(restored)
    assert produced == expected


def test_state_without_a_generator_keeps_only_the_counters() -> None:
    """Without a generator generator_state is None, and a loader with one refuses that state."""
    data: TorchDataLoader[Any] = TorchDataLoader(DataLoader(numbers(6), batch_size=2))
    items(data)
    state = data.state_dict()
    assert state["generator_state"] is None
    assert (state["epoch"], state["batches_consumed"], state["num_batches"]) == (1, 3, 3)
    with pytest.raises(ValueError, match="generator_state is absent in the state"):
        TorchDataLoader(shuffled(6, seed=0, batch_size=2)).load_state_dict(state)
    with pytest.raises(ValueError, match="num_items is 6 in the state but 7"):
        TorchDataLoader(DataLoader(numbers(7), batch_size=2)).load_state_dict(state)


def test_close_stops_persistent_worker_processes() -> None:
    """close() shuts down the torch loader's persistent workers; iterating again is an error."""
    torch_loader = DataLoader(numbers(8), batch_size=4, num_workers=1, persistent_workers=True)
    data: TorchDataLoader[Any] = TorchDataLoader(torch_loader)
    assert items(data) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert multiprocessing.active_children()
    data.close()
    data.close()
    for child in multiprocessing.active_children():
        child.join(JOIN_TIMEOUT_S)
    assert multiprocessing.active_children() == []
    assert torch_loader._iterator is None
    with pytest.raises(DataLoaderError, match="closed TorchDataLoader"):
        iter(data)


def test_only_sized_torch_loaders_are_accepted() -> None:
    """A non-DataLoader or an iterable-style dataset is a TypeError; an empty one a ValueError."""

    class Stream(IterableDataset[int]):
        def __iter__(self) -> Iterator[int]:
            return iter(range(3))

        def __len__(self) -> int:  # sized, but still not indexable
            return 3

    with pytest.raises(TypeError, match=r"must be a torch\.utils\.data\.DataLoader"):
        TorchDataLoader([1, 2])  # type: ignore[arg-type]  # the wrong type is the test
    with pytest.raises(TypeError, match="map-style dataset"):
        TorchDataLoader(DataLoader(Stream()))
    with pytest.raises(ValueError, match="empty"):
        TorchDataLoader(DataLoader(numbers(0)))
