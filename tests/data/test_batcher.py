"""Tests for ember.data._batcher: batcher normalisation and BatchBuilder."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, cast

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

from ember.data import DataLoaderBuilder, InMemDataset
from ember.data import default_collate as ember_collate
from ember.data._batcher import BatchBuilder, batch_function


class Stack:
    def batch(self, items: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        return torch.stack(items).to(device)


def test_a_batcher_object_and_a_function_are_both_accepted() -> None:
    """batch_function returns the object's batch method, or the function itself."""
    items = [torch.ones(2), torch.zeros(2)]
    cpu = torch.device("cpu")
    assert torch.equal(batch_function(Stack())(items, cpu), torch.stack(items))

    def stack(items: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        return torch.stack(items)

    assert batch_function(stack) is stack


@pytest.mark.parametrize("bad", [None, 3, "stack", object()])
def test_anything_else_is_a_type_error(bad: object) -> None:
    """Neither a Batcher nor callable: TypeError showing the value."""
    with pytest.raises(TypeError, match="batcher must have a batch"):
        batch_function(bad)  # type: ignore[arg-type]  # the wrong type is the test


def test_batch_builder_fetches_items_and_calls_the_batcher_on_its_device() -> None:
    """BatchBuilder(indexes) = batcher([dataset[i] for i in indexes], device)."""
    calls = []

    def record(items: list[str], device: torch.device) -> str:
        calls.append(device)
        return "".join(items)

    build = BatchBuilder(InMemDataset("abcdef"), record, torch.device("meta"))
    assert build([4, 0, 2]) == "eac"
    assert calls == [torch.device("meta")]


@dataclasses.dataclass(frozen=True)
class Sample:
    image: torch.Tensor
    label: int
    name: str


class Pair(NamedTuple):
    x: torch.Tensor
    y: float


def test_a_builder_without_a_batcher_collates_like_torch() -> None:
    """Issue 12, item 7: DataLoaderBuilder() without a batcher batches what a dataset holds
    (dataclasses, dicts, tuples, NamedTuples, numbers) as torch's default_collate does."""
    samples = [Sample(torch.full((2,), float(i)), i, f"s{i}") for i in range(5)]
    (first, second) = list(DataLoaderBuilder().batch_size(3).build(InMemDataset(samples)))
    assert isinstance(first, Sample)  # its fields now hold the batch's tensors and lists
    first, second = cast(Any, first), cast(Any, second)
    assert torch.equal(first.image, torch.stack([s.image for s in samples[:3]]))
    assert torch.equal(first.label, torch.tensor([0, 1, 2]))
    assert first.name == ["s0", "s1", "s2"]
    assert torch.equal(second.label, torch.tensor([3, 4]))
    pairs = [Pair(torch.ones(3) * i, i / 2) for i in range(4)]
    (batch,) = list(DataLoaderBuilder().batch_size(4).build(InMemDataset(pairs)))
    assert isinstance(batch, Pair)
    assert torch.equal(cast(Any, batch.y), default_collate([p.y for p in pairs]))
    nested = [{"pair": (torch.tensor(i), float(i)), "sample": samples[i]} for i in range(2)]
    (batch,) = list(DataLoaderBuilder().batch_size(2).build(InMemDataset(nested)))
    assert isinstance(batch["pair"], tuple)  # a tuple stays a tuple (torch makes a list)
    assert torch.equal(batch["pair"][0], torch.tensor([0, 1]))
    assert isinstance(batch["sample"], Sample)


@settings(max_examples=25, deadline=None)
@given(
    st.integers(1, 6),
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True),
    st.integers(0, 2**16),
)
def test_dicts_of_tensors_collate_as_default_collate(
    count: int, keys: list[str], seed: int
) -> None:
    """Whatever the keys and the batch size, the batch equals torch's default_collate."""
    generator = torch.Generator().manual_seed(seed)
    items = [
        {key: torch.randn(2, generator=generator) for key in keys} | {"n": i} for i in range(count)
    ]
    batch = ember_collate(items, torch.device("cpu"))
    expected = default_collate(items)
    assert batch.keys() == expected.keys()
    for key in expected:
        assert torch.equal(batch[key], expected[key])


def test_the_default_batch_is_put_on_the_loaders_device() -> None:
    """set_device moves the collated batch (the meta device stands in for a GPU)."""
    items = [{"x": torch.ones(2), "y": 1} for _ in range(2)]
    loader = DataLoaderBuilder().batch_size(2).set_device("meta").build(InMemDataset(items))
    (batch,) = list(loader)
    assert batch["x"].device.type == "meta"
    assert batch["y"].device.type == "meta"


def test_items_of_another_structure_are_named() -> None:
    with pytest.raises(ValueError, match=r"the first is a tuple of 2, another has \[2, 3\]"):
        ember_collate([(1, 2), (1, 2, 3)], torch.device("cpu"))


def test_torch_s_default_collate_given_as_the_batcher_builds_torch_s_batches() -> None:
    """Issue 29, item 10: torch's default_collate (a collate function of the items alone)
    given as the batcher failed at the first batch with "takes 1 positional argument but 2
    were given"; it now builds the batches torch's DataLoader builds, on one thread or two,
    shuffled too, and a one-argument lambda as well."""
    items = [(torch.tensor([float(i), -float(i)]), i % 3) for i in range(10)]
    torch_loader: torch.utils.data.DataLoader[Any] = torch.utils.data.DataLoader(
        cast(Any, items),
        batch_size=4,
        collate_fn=default_collate,  # a list is a map dataset
    )
    expected = list(torch_loader)
    for workers in (0, 2):
        built = DataLoaderBuilder(default_collate).batch_size(4).num_workers(workers)
        batches = list(built.build(InMemDataset(items)))
        assert len(batches) == len(expected)
        for ours, theirs in zip(batches, expected, strict=True):
            assert all(torch.equal(a, b) for a, b in zip(ours, theirs, strict=True))
    stacked = DataLoaderBuilder(lambda batch: torch.stack([x for x, _ in batch])).batch_size(5)
    assert [b.shape for b in stacked.shuffle(3).build(InMemDataset(items))] == [(5, 2), (5, 2)]


def test_a_collate_function_s_batch_is_moved_to_the_device() -> None:
    """The batch a collate function builds on the CPU is moved to the loader's device (the
    meta device here: any device the machine has)."""
    items = [torch.ones(3) for _ in range(4)]
    loader = DataLoaderBuilder(default_collate).batch_size(2).set_device("meta")
    batches = list(loader.build(InMemDataset(items)))
    assert [b.device.type for b in batches] == ["meta", "meta"]


def test_a_function_of_items_and_device_is_still_called_with_both() -> None:
    """Only a function that cannot take the device is wrapped: ``(items, device=None)`` and
    ``*args`` functions get the device."""
    seen: list[object] = []

    def with_default(items: list[Any], device: Any = None) -> Any:
        seen.append(device)
        return torch.stack(items)

    def with_args(*args: Any) -> Any:
        seen.append(args[1])
        return torch.stack(args[0])

    for batcher in (with_default, with_args):
        assert batch_function(batcher) is batcher
        list(DataLoaderBuilder(batcher).batch_size(2).build(InMemDataset([torch.ones(1)] * 2)))
    assert seen == [torch.device("cpu")] * 2
