"""``DataLoaderBuilder``: Burn's chained way of configuring a loader.

``DataLoaderBuilder(batcher).batch_size(32).shuffle(7).num_workers(2).build(dataset)``. Each
method checks its argument at the call (naming it and the value) and returns the builder itself,
so a builder is configured in place; ``build`` may be called several times, for several
datasets.
"""

from __future__ import annotations

from typing import Generic, Self, TypeVar

import torch

from ember._checks import check_int, check_seed
from ember.data._batcher import Batcher, BatchFn, batch_function
from ember.data._dataset import Dataset
from ember.data._device import DeviceLike, available_device
from ember.data._loader import BatchDataLoader
from ember.data._multithread import MultiThreadDataLoader

__all__ = ["DataLoaderBuilder"]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")


class DataLoaderBuilder(Generic[ItemT, BatchT]):
    """Settings for a loader over any dataset of ``ItemT`` batched by ``batcher``.

    Defaults: ``batch_size`` 1, no shuffling, no workers (batches built on the caller's
    thread), device CPU.
    """

    def __init__(self, batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT]) -> None:
        batch_function(batcher)  # rejects a batcher that is neither a Batcher nor a function
        self._batcher = batcher
        self._batch_size = 1
        self._seed: int | None = None
        self._num_workers = 0
        self._device = torch.device("cpu")

    def batch_size(self, batch_size: int) -> Self:
        """Items per batch (the last batch of a pass may be shorter); ``>= 1``."""
        self._batch_size = check_int("batch_size", batch_size, minimum=1)
        return self

    def shuffle(self, seed: int) -> Self:
        """Shuffle every epoch with a permutation drawn from ``seed`` (a non-negative int)."""
        self._seed = check_seed(seed)
        return self

    def num_workers(self, num_workers: int) -> Self:
        """Worker threads building batches; 0 builds them on the caller's thread."""
        self._num_workers = check_int("num_workers", num_workers, minimum=0)
        return self

    def set_device(self, device: DeviceLike) -> Self:
        """The device the batcher is asked to build batches on (one this machine has)."""
        self._device = available_device(device)
        return self

    def build(self, dataset: Dataset[ItemT]) -> BatchDataLoader[ItemT, BatchT]:
        """A ``BatchDataLoader`` without workers, else a ``MultiThreadDataLoader``; both yield
        the same batches. ValueError if ``dataset`` is empty."""
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
