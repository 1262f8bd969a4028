"""Tests for ember.data._dataset: the Dataset protocol and Burn's wrappers."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import (
    ComposedDataset,
    Dataset,
    InMemDataset,
    MapperDataset,
    PartialDataset,
    SamplerDataset,
    ShuffledDataset,
    WindowsDataset,
)
from ember.data._dataset import fetcher

FAST = settings(max_examples=100, deadline=None)


def test_lists_torch_datasets_and_wrappers_are_datasets() -> None:
    """A list, a sized torch Dataset and every wrapper satisfy the Dataset protocol."""
    base = [1, 2, 3]
    for dataset in (
        base,
        torch.utils.data.TensorDataset(torch.arange(3)),
        InMemDataset(base),
        ShuffledDataset(base, 0),
        PartialDataset(base, 0, 2),
        MapperDataset(base, str),
        ComposedDataset([base, base]),
        SamplerDataset(base, 4, seed=0),
        WindowsDataset(base, 2),
    ):
        assert isinstance(dataset, Dataset)
    assert not isinstance(object(), Dataset)


@pytest.mark.parametrize(
    "make",
    [
        lambda bad: ShuffledDataset(bad, 0),
        lambda bad: PartialDataset(bad, 0, 0),
        lambda bad: MapperDataset(bad, str),
        lambda bad: ComposedDataset([[1], bad]),
        lambda bad: SamplerDataset(bad, 1),
        lambda bad: WindowsDataset(bad, 1),
    ],
)
def test_wrappers_reject_a_non_dataset(make: Any) -> None:
    """Wrapping something without __getitem__/__len__ is a TypeError at construction."""
    with pytest.raises(TypeError, match="Dataset"):
        make(42)


def test_in_mem_dataset_indexes_and_rejects_out_of_range() -> None:
    """InMemDataset copies its items; an index outside [0, len) names the index and length."""
    source = ["a", "b", "c"]
    dataset = InMemDataset(source)
    source.append("d")
    assert len(dataset) == 3
    assert [dataset[i] for i in range(3)] == ["a", "b", "c"]
    with pytest.raises(IndexError, match="index 3 out of range for a dataset of length 3"):
        dataset[3]
    with pytest.raises(IndexError, match="index -1 out of range"):
        dataset[-1]


def test_from_csv_with_header_gives_dicts(tmp_path: Path) -> None:
    """With a header each row is a dict of strings; blank lines are skipped."""
    path = tmp_path / "rows.csv"
    path.write_text('x,label\n1.5,"cat, big"\n\n2,dog\n', encoding="utf-8")
    dataset = InMemDataset.from_csv(path)
    assert len(dataset) == 2
    assert dataset[0] == {"x": "1.5", "label": "cat, big"}
    assert dataset[1] == {"x": "2", "label": "dog"}


def test_from_csv_without_header_gives_lists(tmp_path: Path) -> None:
    """Without a header each row is a list of strings; the delimiter is honoured."""
    path = tmp_path / "rows.tsv"
    path.write_text("1\ta\n2\tb\n", encoding="utf-8")
    dataset = InMemDataset.from_csv(path, delimiter="\t", has_header=False)
    assert [dataset[0], dataset[1]] == [["1", "a"], ["2", "b"]]


def test_from_csv_rejects_a_ragged_row_and_an_empty_file(tmp_path: Path) -> None:
    """A row whose field count differs from the header's names the file and line."""
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("a,b\n1,2\n3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"ragged\.csv:3: expected 2 fields"):
        InMemDataset.from_csv(ragged)
    empty = tmp_path / "empty.csv"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty"):
        InMemDataset.from_csv(empty)


def test_from_json_rows_reads_one_object_per_line(tmp_path: Path) -> None:
    """Each non-blank line is one JSON item; an invalid line names the file and line."""
    rows = [{"x": [1.0, 2.0], "y": 3}, {"x": [], "y": None}]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n\n", encoding="utf-8")
    dataset = InMemDataset.from_json_rows(path)
    assert [dataset[0], dataset[1]] == rows
    path.write_text('{"ok": 1}\n{broken\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"rows\.jsonl:2: invalid JSON"):
        InMemDataset.from_json_rows(path)


@FAST
@given(n=st.integers(0, 60), seed=st.integers(0, 2**64))
def test_shuffled_dataset_is_a_seeded_permutation(n: int, seed: int) -> None:
    """ShuffledDataset holds every item once, in an order fixed by the seed."""
    dataset = ShuffledDataset(list(range(n)), seed)
    items = [dataset[i] for i in range(len(dataset))]
    assert sorted(items) == list(range(n))
    again = ShuffledDataset(list(range(n)), seed)
    assert [again[i] for i in range(n)] == items


def test_shuffled_dataset_orders_differ_between_seeds() -> None:
    """Two seeds give two different orders of 50 items."""
    a, b = ShuffledDataset(list(range(50)), 1), ShuffledDataset(list(range(50)), 2)
    assert [a[i] for i in range(50)] != [b[i] for i in range(50)]
    assert [a[i] for i in range(50)] != list(range(50))


@pytest.mark.parametrize(
    ("seed", "error", "message"),
    [
        (True, TypeError, "seed must be an int, got True"),
        (1.5, TypeError, "seed must be an int, got 1.5"),
        ("7", TypeError, "seed must be an int, got '7'"),
        (-1, ValueError, "seed must be >= 0, got -1"),
    ],
)
def test_shuffled_dataset_rejects_bad_seeds(
    seed: Any, error: type[Exception], message: str
) -> None:
    """A seed that is not a non-negative int is refused, naming seed and the value."""
    with pytest.raises(error, match=message):
        ShuffledDataset([1, 2], seed)


def test_partial_dataset_is_a_view_with_checked_bounds() -> None:
    """PartialDataset reads [start, end) of its dataset and validates the range."""
    part = PartialDataset(list(range(10)), 3, 7)
    assert len(part) == 4
    assert [part[i] for i in range(4)] == [3, 4, 5, 6]
    with pytest.raises(IndexError, match="index 4 out of range for a dataset of length 4"):
        part[4]
    with pytest.raises(ValueError, match="start=5, end=4"):
        PartialDataset(list(range(10)), 5, 4)
    with pytest.raises(ValueError, match="end=11"):
        PartialDataset(list(range(10)), 0, 11)


@FAST
@given(n=st.integers(0, 50), parts=st.integers(1, 12))
def test_partial_split_follows_burns_rule(n: int, parts: int) -> None:
    """split(n) gives len//n items a part, the last part extends to the end, together all."""
    pieces = PartialDataset.split(list(range(n)), parts)
    assert len(pieces) == parts
    assert [len(p) for p in pieces[:-1]] == [n // parts] * (parts - 1)
    assert [p[i] for p in pieces for i in range(len(p))] == list(range(n))


def test_partial_split_rejects_zero_parts() -> None:
    """Splitting into fewer than one part names n."""
    with pytest.raises(ValueError, match="n must be >= 1, got 0"):
        PartialDataset.split([1], 0)


def test_mapper_dataset_is_lazy() -> None:
    """MapperDataset applies fn on each access, never ahead."""
    calls: list[int] = []

    def double(x: int) -> int:
        calls.append(x)
        return 2 * x

    mapped = MapperDataset(list(range(5)), double)
    assert calls == []
    assert mapped[3] == 6
    assert mapped[3] == 6
    assert calls == [3, 3]
    with pytest.raises(TypeError, match="fn must be callable"):
        MapperDataset([1], 3)  # type: ignore[arg-type]  # the wrong type is the test


@FAST
@given(lengths=st.lists(st.integers(0, 6), max_size=5))
def test_composed_dataset_concatenates(lengths: list[int]) -> None:
    """ComposedDataset's items are its datasets' items, in order."""
    datasets = [[(d, i) for i in range(n)] for d, n in enumerate(lengths)]
    composed = ComposedDataset(datasets)
    assert len(composed) == sum(lengths)
    assert [composed[i] for i in range(len(composed))] == [x for d in datasets for x in d]
    with pytest.raises(IndexError):
        composed[len(composed)]


@FAST
@given(
    n=st.integers(1, 20),
    size=st.integers(0, 70),
    replace=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_sampler_dataset_is_deterministic_and_index_addressable(
    n: int, size: int, replace: bool, seed: int
) -> None:
    """Item i is a function of (seed, i); without replacement counts differ by at most one."""
    sampled = SamplerDataset(list(range(n)), size, with_replacement=replace, seed=seed)
    items = [sampled[i] for i in range(len(sampled))]
    assert len(items) == size
    assert all(0 <= x < n for x in items)
    again = SamplerDataset(list(range(n)), size, with_replacement=replace, seed=seed)
    assert [again[i] for i in reversed(range(size))] == items[::-1]
    if not replace:
        counts = collections.Counter(items)
        assert {counts[x] for x in range(n)} <= {size // n, size // n + 1}


def test_sampler_dataset_checks_its_arguments() -> None:
    """Sampling from nothing, a negative size or a bad seed is refused by name."""
    with pytest.raises(ValueError, match="empty dataset"):
        SamplerDataset([], 3)
    with pytest.raises(ValueError, match="size must be >= 0, got -1"):
        SamplerDataset([1], -1)
    with pytest.raises(TypeError, match="seed must be an int"):
        SamplerDataset([1], 1, seed=False)
    assert len(SamplerDataset([1, 2], 5)) == 5  # seed=None draws fresh entropy


@FAST
@given(n=st.integers(0, 20), size=st.integers(1, 25))
def test_windows_dataset(n: int, size: int) -> None:
    """Item i is items i..i+size-1; there are max(n - size + 1, 0) windows."""
    windows = WindowsDataset(list(range(n)), size)
    assert len(windows) == max(n - size + 1, 0)
    for i in range(len(windows)):
        assert windows[i] == list(range(i, i + size))
    with pytest.raises(IndexError):
        windows[len(windows)]


def test_windows_dataset_rejects_size_zero() -> None:
    """A window of size 0 is refused, naming size."""
    with pytest.raises(ValueError, match="size must be >= 1, got 0"):
        WindowsDataset([1, 2], 0)


def test_fetcher_uses_batched_getitems_when_available() -> None:
    """A dataset with torch's __getitems__ is asked for the whole batch in one call."""

    class Batched:
        def __init__(self) -> None:
            self.calls: list[list[int]] = []

        def __getitem__(self, index: int) -> int:
            raise AssertionError("per-item access used")

        def __getitems__(self, indexes: list[int]) -> list[int]:
            self.calls.append(indexes)
            return [10 * i for i in indexes]

        def __len__(self) -> int:
            return 10

    dataset = Batched()
    assert fetcher(dataset)([3, 1]) == [30, 10]
    assert dataset.calls == [[3, 1]]
    assert fetcher(InMemDataset("abc"))([2, 0]) == ["c", "a"]
