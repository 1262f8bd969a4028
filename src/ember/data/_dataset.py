"""Datasets: anything indexable by ``int`` with a length, and Burn's wrappers around them.

``Dataset`` is a protocol, so a list, a map-style ``torch.utils.data.Dataset`` that defines
``__len__`` and a Hugging Face dataset are datasets without adapting them. The wrappers are lazy
views (except where noted) that all satisfy the protocol themselves, so they compose.

Indexes: the wrappers accept ``0 <= index < len`` only and raise IndexError naming the index and
the length otherwise. Negative indexes are rejected rather than counted from the end: a loader
never produces one, so one is always a bug that wrapping around would hide.
"""

from __future__ import annotations

import bisect
import csv
import itertools
import json
import operator
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import (
    Any,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    final,
    overload,
    runtime_checkable,
)

from ember._checks import check_int, check_seed
from ember.data import _rng as rng

__all__ = [
    "ComposedDataset",
    "Dataset",
    "InMemDataset",
    "MapperDataset",
    "PartialDataset",
    "SamplerDataset",
    "ShuffledDataset",
    "WindowsDataset",
    "check_dataset",
    "fetcher",
]

T = TypeVar("T")
U = TypeVar("U")
T_co = TypeVar("T_co", covariant=True)


@runtime_checkable
class Dataset(Protocol[T_co]):
    """A finite collection of items addressed by ``0 <= index < len(dataset)``."""

    def __getitem__(self, index: int, /) -> T_co:
        """The item at ``index``."""
        ...

    def __len__(self) -> int:
        """The number of items."""
        ...


def check_dataset(dataset: object, name: str = "dataset") -> None:
    """Raise TypeError unless ``dataset`` has ``__getitem__`` and ``__len__``."""
    if not isinstance(dataset, Dataset):
        raise TypeError(
            f"{name} must be a Dataset (define __getitem__(int) and __len__), "
            f"got {type(dataset).__name__}"
        )


def fetcher(dataset: Dataset[T]) -> Callable[[list[int]], list[T]]:
    """A function returning the items at a list of valid indexes, as fast as ``dataset`` allows.

    Loaders only ask for indexes they know are in range, so the in-memory case reads the list
    directly, and a dataset with torch's batched ``__getitems__`` (Hugging Face datasets, torch's
    ``Subset``) is asked for the whole batch at once.
    """
    get: Callable[[int], T]
    if isinstance(dataset, InMemDataset):
        get = dataset._items.__getitem__  # bounds checks skipped: the loader's indexes are valid
    else:
        batched: Callable[[list[int]], list[T]] | None = getattr(dataset, "__getitems__", None)
        if batched is not None:
            return batched
        get = dataset.__getitem__
    return lambda indexes: list(map(get, indexes))


def _check_index(index: int, length: int) -> int:
    index = operator.index(index)
    if not 0 <= index < length:
        raise IndexError(f"index {index} out of range for a dataset of length {length}")
    return index


@final
class InMemDataset(Generic[T]):
    """A dataset over items held in memory (copied into a list at construction)."""

    __slots__ = ("_items",)

    def __init__(self, items: Iterable[T]) -> None:
        self._items: list[T] = list(items)

    def __getitem__(self, index: int) -> T:
        return self._items[_check_index(index, len(self._items))]

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"InMemDataset(<{len(self._items)} items>)"

    @overload
    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        *,
        delimiter: str = ",",
        has_header: Literal[True] = True,
        encoding: str = "utf-8",
    ) -> InMemDataset[dict[str, str]]: ...

    @overload
    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        *,
        delimiter: str = ",",
        has_header: Literal[False],
        encoding: str = "utf-8",
    ) -> InMemDataset[list[str]]: ...

    @classmethod
    def from_csv(
        cls,
        path: str | Path,
        *,
        delimiter: str = ",",
        has_header: bool = True,
        encoding: str = "utf-8",
    ) -> InMemDataset[dict[str, str]] | InMemDataset[list[str]]:
        """The rows of a CSV file, read with the stdlib ``csv`` module; blank lines are skipped.

        With ``has_header`` (the default) the first row names the columns and each item is a
        ``dict[str, str]`` from column name to field; without it each item is the row's
        ``list[str]``. Values stay strings: convert them with a ``MapperDataset``. A row whose
        field count differs from the header's raises ValueError naming the file and line.
        """
        with open(path, newline="", encoding=encoding) as file:
            reader = csv.reader(file, delimiter=delimiter)
            rows = [(reader.line_num, row) for row in reader if row]
        if not has_header:
            return InMemDataset(row for _, row in rows)
        if not rows:
            raise ValueError(f"{path}: the CSV file is empty, expected a header row")
        header = rows[0][1]
        for line, row in rows[1:]:
            if len(row) != len(header):
                raise ValueError(
                    f"{path}:{line}: expected {len(header)} fields as in the header, got {len(row)}"
                )
        return InMemDataset(dict(zip(header, row, strict=True)) for _, row in rows[1:])

    @classmethod
    def from_json_rows(cls, path: str | Path, *, encoding: str = "utf-8") -> InMemDataset[Any]:
        """One item per line of a JSON-lines file, parsed with the stdlib ``json`` module.

        Blank lines are skipped; a line that is not valid JSON raises ValueError naming the file
        and the line.
        """
        items = []
        with open(path, encoding=encoding) as file:
            for line_number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{line_number}: invalid JSON: {error}") from error
        return InMemDataset(items)


class ShuffledDataset(Generic[T]):
    """A fixed random permutation of ``dataset``, drawn once at construction from ``seed``."""

    __slots__ = ("_dataset", "_indexes")

    def __init__(self, dataset: Dataset[T], seed: int) -> None:
        check_dataset(dataset)
        seed = check_seed(seed)
        self._dataset = dataset
        self._indexes: list[int] = (
            rng.generator(seed, rng.SHUFFLED_DATASET_STREAM).permutation(len(dataset)).tolist()
        )

    def __getitem__(self, index: int) -> T:
        return self._dataset[self._indexes[_check_index(index, len(self._indexes))]]

    def __len__(self) -> int:
        return len(self._indexes)


class PartialDataset(Generic[T]):
    """The items ``[start, end)`` of ``dataset`` (a view; ``0 <= start <= end <= len``)."""

    __slots__ = ("_dataset", "_end", "_start")

    def __init__(self, dataset: Dataset[T], start: int, end: int) -> None:
        check_dataset(dataset)
        start = check_int("start", start, minimum=None)
        end = check_int("end", end, minimum=None)
        if not 0 <= start <= end <= len(dataset):
            raise ValueError(
                f"PartialDataset needs 0 <= start <= end <= {len(dataset)} (the dataset's "
                f"length), got start={start}, end={end}"
            )
        self._dataset = dataset
        self._start = start
        self._end = end

    def __getitem__(self, index: int) -> T:
        return self._dataset[self._start + _check_index(index, self._end - self._start)]

    def __len__(self) -> int:
        return self._end - self._start

    @staticmethod
    def split(dataset: Dataset[T], n: int) -> list[PartialDataset[T]]:
        """``n`` consecutive parts (Burn's rule): each has ``len // n`` items except the last,
        which extends to the end, so parts may be empty when ``n > len``."""
        check_dataset(dataset)
        n = check_int("n", n, minimum=1)
        length = len(dataset)
        chunk = length // n
        return [
            PartialDataset(dataset, i * chunk, length if i == n - 1 else (i + 1) * chunk)
            for i in range(n)
        ]


class MapperDataset(Generic[U]):
    """``fn(dataset[i])`` computed on each access (lazy; nothing is cached)."""

    __slots__ = ("_dataset", "_fn")

    def __init__(self, dataset: Dataset[T], fn: Callable[[T], U]) -> None:
        check_dataset(dataset)
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        self._dataset: Dataset[Any] = dataset
        self._fn: Callable[[Any], U] = fn

    def __getitem__(self, index: int) -> U:
        return self._fn(self._dataset[_check_index(index, len(self._dataset))])

    def __len__(self) -> int:
        return len(self._dataset)


class ComposedDataset(Generic[T]):
    """The concatenation of ``datasets`` (their lengths are read once, at construction)."""

    __slots__ = ("_datasets", "_ends")

    def __init__(self, datasets: Sequence[Dataset[T]]) -> None:
        for i, dataset in enumerate(datasets):
            check_dataset(dataset, f"datasets[{i}]")
        self._datasets = list(datasets)
        self._ends = list(itertools.accumulate(len(d) for d in self._datasets))

    def __getitem__(self, index: int) -> T:
        index = _check_index(index, len(self))
        part = bisect.bisect_right(self._ends, index)
        start = self._ends[part - 1] if part else 0
        return self._datasets[part][index - start]

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0


class SamplerDataset(Generic[T]):
    """``size`` items sampled from ``dataset``, with or without replacement.

    Unlike Burn's, which draws a new sample on every access, the sample is an index table drawn
    once at construction: item ``i`` is a pure function of ``seed`` and ``i``, so the dataset is
    safe to read from several threads and reproducible (``seed=None`` draws fresh entropy).
    Without replacement, every source item appears ``size // len`` times plus once more for a
    random ``size % len`` of them, in random order. Build a new one to draw a new sample.
    """

    __slots__ = ("_dataset", "_indexes")

    def __init__(
        self,
        dataset: Dataset[T],
        size: int,
        with_replacement: bool = True,
        seed: int | None = None,
    ) -> None:
        check_dataset(dataset)
        size = check_int("size", size, minimum=0)
        if seed is not None:
            seed = check_seed(seed)
        source = len(dataset)
        if source == 0 and size > 0:
            raise ValueError(f"cannot sample size={size} items from an empty dataset")
        generator = rng.generator(seed, rng.SAMPLER_DATASET_STREAM)
        if with_replacement:
            table = generator.integers(0, max(source, 1), size)
        else:
            copies, rest = divmod(size, source) if source else (0, 0)
            import numpy as np  # lazy: keeps `import ember` fast ("light import")

            table = np.concatenate(
                [np.tile(np.arange(source), copies), generator.choice(source, rest, replace=False)]
            )
            generator.shuffle(table)
        self._dataset = dataset
        self._indexes: list[int] = table.tolist()

    def __getitem__(self, index: int) -> T:
        return self._dataset[self._indexes[_check_index(index, len(self._indexes))]]

    def __len__(self) -> int:
        return len(self._indexes)


class WindowsDataset(Generic[T]):
    """Item ``i`` is the list ``[dataset[i], ..., dataset[i + size - 1]]``.

    Its length is ``max(len(dataset) - size + 1, 0)``.
    """

    __slots__ = ("_dataset", "_size")

    def __init__(self, dataset: Dataset[T], size: int) -> None:
        check_dataset(dataset)
        self._size = check_int("size", size, minimum=1)
        self._dataset = dataset

    def __getitem__(self, index: int) -> list[T]:
        index = _check_index(index, len(self))
        return [self._dataset[i] for i in range(index, index + self._size)]

    def __len__(self) -> int:
        return max(len(self._dataset) - self._size + 1, 0)
