"""``MultiThreadDataLoader``: the batches of ``BatchDataLoader``, built ahead on worker threads.

Burn's multi-thread loader hands each worker a fixed part of the data and yields batches in the
order the threads finish them, so its batch sequence depends on scheduling. Here the consumer
keeps the epoch plan of ``BatchDataLoader`` and only the *building* of each batch (fetching the
items and calling the batcher) moves to the threads ("same batches"; ``_threads`` has the
picture). So the sequence of batches equals ``BatchDataLoader``'s for the same seed whatever the
number of workers, at most ``prefetch`` batches exist at a time, and state saved with any worker
count restores with any other. Throughput scales with the workers when the batcher releases the
GIL (torch operations do); a batcher that holds it (pure-Python decoding) is better served by
``TorchDataLoader``'s worker processes.

Lifecycle: the threads are daemons, started by the first ``iter()`` and reused by every later
pass. A new ``iter()`` cancels the unfinished pass (its queued batches are skipped). An error
raised by the dataset or batcher on a thread is re-raised by the consumer's ``next()`` at that
batch's place in the sequence, as the same exception object with a note naming the thread and
the batch; the pass then ends and the threads exit (a later ``iter()`` starts new ones).
``close()`` and garbage collection of the loader stop the threads too.
"""

from __future__ import annotations

from typing import Generic, Self, TypeVar

import torch

from ember._checks import check_int
from ember._device import DeviceLike
from ember.data._batcher import Batcher, BatchFn
from ember.data._dataset import Dataset
from ember.data._loader import BatchDataLoader
from ember.data._threads import ThreadedMap

__all__ = ["MultiThreadDataLoader", "worker_threads"]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")


def worker_threads(num_workers: int, prefetch: int | None) -> ThreadedMap:
    """The threads of a loader with ``num_workers >= 1`` and ``prefetch`` (default
    ``2 * num_workers``) batches ahead; ValueError/TypeError naming a bad argument."""
    num_workers = check_int("num_workers", num_workers, minimum=1)
    ahead = 2 * num_workers if prefetch is None else check_int("prefetch", prefetch, minimum=1)
    return ThreadedMap(num_workers, ahead)


class MultiThreadDataLoader(BatchDataLoader[ItemT, BatchT], Generic[ItemT, BatchT]):
    """A ``BatchDataLoader`` whose batches are built by ``num_workers`` threads ("same batches").

    It yields exactly the batches of ``BatchDataLoader`` with the same dataset, batcher, batch
    size and seed, in the same order, and has the same state format. At most ``prefetch``
    batches (default ``2 * num_workers``) are built or waiting at any time. See the module
    docstring for the threads' lifecycle and errors.
    """

    def __init__(
        self,
        dataset: Dataset[ItemT],
        batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT],
        *,
        num_workers: int,
        batch_size: int = 1,
        seed: int | None = None,
        device: DeviceLike = "cpu",
        prefetch: int | None = None,
    ) -> None:
        threads = worker_threads(num_workers, prefetch)
        super().__init__(dataset, batcher, batch_size=batch_size, seed=seed, device=device)
        self._threads: ThreadedMap = threads

    def _fresh(self, device: torch.device) -> Self:
        return type(self)(
            self._dataset,
            self._batcher,
            num_workers=self._threads.num_workers,
            batch_size=self._batch_size,
            seed=self._seed,
            device=device,
            prefetch=self._threads.prefetch,
        )

    def _describe(self) -> dict[str, object]:
        return {**super()._describe(), "num_workers": self._threads.num_workers}
