"""``DataLoaderBuilder``: Burn's chained way of configuring a loader.

``DataLoaderBuilder(batcher).batch_size(32).shuffle(7).num_workers(2).build(dataset)``; without
a batcher, items are collated as torch's ``default_collate`` does (``default_collate``). Each
method checks its argument at the call (naming it and the value) and returns the builder itself,
so a builder is configured in place; ``build`` may be called several times, for several
datasets. ``build`` takes a map-style dataset (``BatchDataLoader``/``MultiThreadDataLoader``)
or a streaming source (``StreamingDataLoader``: an iterable such as a torch or Hugging Face
``IterableDataset``, or a function returning an iterator).
"""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar, overload

import torch
from torch.utils.data import IterableDataset

from ember._checks import check_int, check_seed
from ember._device import DeviceLike, available_device
from ember.data._batcher import Batcher, BatchFn, CollateFn, as_batcher
from ember.data._collate import default_collate
from ember.data._dataset import Dataset
from ember.data._loader import BatchDataLoader
from ember.data._multithread import MultiThreadDataLoader
from ember.data._stream import Source, StreamingDataLoader

__all__ = ["DataLoaderBuilder"]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")


class DataLoaderBuilder(Generic[ItemT, BatchT]):
    """Settings for a loader over any dataset of ``ItemT`` batched by ``batcher``.

    Defaults: ``batch_size`` 1, no shuffling, no workers (batches built on the caller's
    thread), device CPU, and without a batcher the items collated as torch's
    ``default_collate`` does (tensors, numbers, dicts, tuples, NamedTuples and dataclasses),
    the batch put on the loader's device.
    """

    @overload
    def __init__(self: DataLoaderBuilder[Any, Any], batcher: None = None) -> None: ...

    @overload
    def __init__(
        self, batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT] | CollateFn[ItemT, BatchT]
    ) -> None: ...

    def __init__(
        self,
        batcher: Batcher[ItemT, BatchT]
        | BatchFn[ItemT, BatchT]
        | CollateFn[ItemT, BatchT]
        | None = None,
    ) -> None:
        # a collate function of the items alone (torch's default_collate) is wrapped; anything
        # that is no batcher is refused here
        self._batcher = default_collate if batcher is None else as_batcher(batcher)
        self._batch_size = 1
        self._seed: int | None = None
        self._buffer_size: int | None = None
        self._num_workers = 0
        self._device = torch.device("cpu")

    def batch_size(self, batch_size: int) -> Self:
        """Items per batch (the last batch of a pass may be shorter); ``>= 1``."""
        self._batch_size = check_int("batch_size", batch_size, minimum=1)
        return self

    def shuffle(self, seed: int, *, buffer_size: int | None = None) -> Self:
        """Shuffle every epoch from ``seed`` (a non-negative int): a map-style dataset by a
        permutation of all its items, a streaming source through a buffer of ``buffer_size``
        items (required for one, refused for the other, when ``build`` is called)."""
        self._seed = check_seed(seed)
        self._buffer_size = (
            None if buffer_size is None else check_int("buffer_size", buffer_size, minimum=1)
        )
        return self

    def num_workers(self, num_workers: int) -> Self:
        """Worker threads building batches; 0 builds them on the caller's thread."""
        self._num_workers = check_int("num_workers", num_workers, minimum=0)
        return self

    def set_device(self, device: DeviceLike) -> Self:
        """The device the batcher is asked to build batches on (one this machine has)."""
        self._device = available_device(device)
        return self

    @overload
    def build(self, source: Dataset[ItemT]) -> BatchDataLoader[ItemT, BatchT]: ...

    @overload
    def build(self, source: Source[ItemT]) -> StreamingDataLoader[ItemT, BatchT]: ...

    def build(self, source: Any) -> Any:
        """A loader over ``source``: for a map-style dataset a ``BatchDataLoader`` without
        workers, else a ``MultiThreadDataLoader`` (both yield the same batches; ValueError if
        it is empty); for an iterable that is not one (a torch or Hugging Face
        ``IterableDataset``) or a function returning an iterator, a ``StreamingDataLoader``.
        ValueError when the shuffle's ``buffer_size`` does not fit the kind of source."""
        if isinstance(source, Dataset) and not isinstance(source, IterableDataset):
            if self._buffer_size is not None:
                raise ValueError(
                    f"shuffle(..., buffer_size={self._buffer_size}) is for streaming sources; "
                    f"a {type(source).__name__} with a length is shuffled by a permutation of "
                    "all its items: call shuffle(seed) without buffer_size"
                )
            return self._build_map(source)
        if self._seed is not None and self._buffer_size is None:
            raise ValueError(
                f"shuffle({self._seed}) on a streaming source ({type(source).__name__}) needs a "
                f"buffer size: call shuffle({self._seed}, buffer_size=N), which shuffles through "
                "a buffer of N items (see docs/data.md)"
            )
        return StreamingDataLoader(
            source,
            self._batcher,
            batch_size=self._batch_size,
            seed=self._seed,
            buffer_size=self._buffer_size,
            num_workers=self._num_workers,
            device=self._device,
        )

    def _build_map(self, dataset: Dataset[ItemT]) -> BatchDataLoader[ItemT, BatchT]:
        if self._num_workers == 0:
            return BatchDataLoader(
                dataset,
                self._batcher,
                batch_size=self._batch_size,
                seed=self._seed,
                device=self._device,
            )
        return MultiThreadDataLoader(
            dataset,
            self._batcher,
            num_workers=self._num_workers,
            batch_size=self._batch_size,
            seed=self._seed,
            device=self._device,
        )
