"""``default_collate``: torch's collation as a batcher, and the one-gather path over tensors."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import TensorDataset
from torch.utils.data import default_collate as torch_collate

from ember.data import (
    BatchDataLoader,
    DataLoaderBuilder,
    InMemDataset,
    MapperDataset,
    default_collate,
)
from ember.data._collate import gather_path

CPU = torch.device("cpu")


class Pair(NamedTuple):
    x: torch.Tensor
    label: int


def same(a: Any, b: Any) -> bool:
    """Equal structure, types, dtypes, shapes and values."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
    if isinstance(a, dict):
        return type(b) is dict and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


@pytest.mark.parametrize(
    "items",
    [
        [torch.randn(3), torch.randn(3)],
        [(torch.randn(2), 1.5), (torch.randn(2), 2.5)],
        [{"x": torch.randn(2), "y": 3}, {"x": torch.randn(2), "y": 4}],
        [Pair(torch.randn(2), 1), Pair(torch.randn(2), 0)],
    ],
    ids=["tensors", "tuples", "dicts", "namedtuples"],
)
def test_default_collate_builds_torchs_batch(items: list[Any]) -> None:
    """Tensors, numbers, tuples, NamedTuples and dicts collate as torch's do (torch makes lists
    of tuple columns; ember keeps the tuple)."""
    ours, theirs = default_collate(items, CPU), torch_collate(items)
    if type(items[0]) is tuple:
        theirs = tuple(theirs)
    assert same(ours, theirs)


def test_default_collate_keeps_other_values_as_a_list() -> None:
    """Strings and other values are not collated: the batch holds the list of them."""
    batch = default_collate([(torch.zeros(1), "a"), (torch.ones(1), "b")], CPU)
    assert same(batch, (torch.tensor([[0.0], [1.0]]), ["a", "b"]))


def tensor_rows(count: int, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 4, generator=generator)
    y = torch.randint(0, 10, (count,), generator=generator)
    return TensorDataset(x, y)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 70), st.integers(1, 16), st.none() | st.integers(0, 5))
def test_a_tensor_dataset_is_gathered_into_the_same_batches(
    count: int, batch_size: int, seed: int | None
) -> None:
    """Over a TensorDataset, default_collate's batches are gathered with one index op per
    tensor, and they equal the batches built item by item, epoch after epoch."""
    dataset = tensor_rows(count)
    assert gather_path(dataset, default_collate, CPU) is not None
    items = MapperDataset(dataset, lambda row: row)  # the same items, batched item by item
    assert gather_path(items, default_collate, CPU) is None
    fast = BatchDataLoader(dataset, default_collate, batch_size=batch_size, seed=seed)
    slow = BatchDataLoader(items, default_collate, batch_size=batch_size, seed=seed)
    for _ in range(2):
        pairs = list(zip(fast, slow, strict=True))
        assert pairs and all(same(a, b) for a, b in pairs)


def test_gathered_batches_are_the_same_with_worker_threads_and_after_a_resume() -> None:
    """The gather path is the batch builder's, so workers and resumes see the same batches."""
    dataset = tensor_rows(50)
    builder = DataLoaderBuilder(default_collate).batch_size(8).shuffle(3)
    single = builder.build(dataset)
    reference = list(single) + list(single)
    threaded = builder.num_workers(2).build(dataset)
    try:
        assert all(
            same(a, b) for a, b in zip(reference, list(threaded) + list(threaded), strict=True)
        )
    finally:
        threaded.close()
    resumed = DataLoaderBuilder(default_collate).batch_size(8).shuffle(3).build(dataset)
    iterator = iter(resumed)
    next(iterator)
    state = resumed.state_dict()
    fresh = DataLoaderBuilder(default_collate).batch_size(8).shuffle(3).build(dataset)
    fresh.load_state_dict(state)
    assert all(same(a, b) for a, b in zip(list(fresh), reference[1:7], strict=True))


def test_only_default_collate_over_a_tensor_dataset_takes_the_gather_path() -> None:
    """Another batcher, or another dataset with the same items, is built item by item."""

    def stack(items: list[Any], device: torch.device) -> Any:
        return default_collate(items, device)

    assert gather_path(tensor_rows(4), stack, CPU) is None
    assert (
        gather_path(InMemDataset(tensor_rows(4)[i] for i in range(4)), default_collate, CPU) is None
    )


@given(
    st.one_of(
        st.lists(st.floats(allow_nan=False), min_size=1, max_size=40),
        st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=40),
    )
)
def test_numbers_collate_as_torchs(numbers: list[Any]) -> None:
    """Python floats become float64 and ints int64 tensors with the same values as torch's
    collate gives, also as a tuple column."""
    assert same(default_collate(numbers, CPU), torch_collate(numbers))
    pairs = [(torch.tensor([1.0]), number) for number in numbers]
    ours, theirs = default_collate(pairs, CPU), torch_collate(pairs)
    assert same(ours[1], theirs[1])


def test_items_of_another_structure_are_named() -> None:
    """A tuple of another length is refused with the lengths; a column's own error (an inner
    tuple of another length) names the inner structure."""
    with pytest.raises(ValueError, match=r"first is a tuple of 2, another has \[2, 3\] entries"):
        default_collate([(1, 2.0), (1, 2.0, 3)], CPU)
    with pytest.raises(ValueError, match=r"first is a tuple of 1, another has \[1, 2\] entries"):
        default_collate([(1, (2,)), (1, (2, 3))], CPU)
