"""``MultiThreadDataLoader``: the batches of ``BatchDataLoader``, built ahead on worker threads.

Burn's multi-thread loader hands each worker a fixed part of the data and yields batches in the
order the threads finish them, so its batch sequence depends on scheduling. Here the consumer
keeps the epoch plan of ``BatchDataLoader`` and only the *building* of each batch (fetching the
items and calling the batcher) moves to the threads ("same batches")::

    consumer (iter/next)                               threads dataloader-0 .. dataloader-{n-1}
    plan = the BatchDataLoader epoch plan
    submit batches first .. first+prefetch-1  ──tasks──►  build(indexes) for any queued batch
    next(): wait for batch j in the reorder   ◄─results─  (j, error, batch), in finishing order
            buffer, submit batch j+prefetch

So the sequence of batches equals ``BatchDataLoader``'s for the same seed whatever the number of
workers, at most ``prefetch`` batches exist at a time, and state saved with any worker count
restores with any other. Throughput scales with the workers when the batcher releases the GIL
(torch operations do); a batcher that holds it (pure-Python decoding) is better served by
``TorchDataLoader``'s worker processes.

Lifecycle: the threads are daemons, started by the first ``iter()`` and reused by every later
pass. A new ``iter()`` cancels the unfinished pass (its queued batches are skipped). An error
raised by the dataset or batcher on a thread is re-raised by the consumer's ``next()`` at that
batch's place in the sequence, as the same exception object with a note naming the thread and
the batch; the pass then ends and the threads exit (a later ``iter()`` starts new ones).
``close()`` and garbage collection of the loader stop the threads too.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, Self, TypeVar

import torch

from ember._checks import check_int
from ember.data._batcher import Batcher, BatchFn
from ember.data._dataset import Dataset
from ember.data._device import DeviceLike
from ember.data._loader import BatchDataLoader

__all__ = ["MultiThreadDataLoader"]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")

_JOIN_TIMEOUT_S = 10.0  # close() waits this long for a thread to finish the batch it is building

_Result = tuple[int, BaseException | None, Any]  # (batch index, error, batch)
_CANCELLED: _Result = (-1, None, None)  # wakes a consumer waiting on a cancelled pass


class _Pass:
    """One pass as the threads see it: where its results go, and whether it was cancelled."""

    __slots__ = ("cancelled", "epoch", "results")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        # A plain bool is enough: threads only read it, and a stale read costs one wasted batch.
        self.cancelled = False
        self.results: queue.SimpleQueue[_Result] = queue.SimpleQueue()

    def cancel(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self.results.put(_CANCELLED)


_Task = tuple[_Pass, int, list[int]]


def _build_one(build: Callable[[list[int]], Any], task: _Task) -> None:
    """Build one batch and post the batch or the error (a function, so no local keeps it)."""
    pass_, index, indexes = task
    try:
        batch = build(indexes)
    except BaseException as error:  # everything goes to the consumer, which must never hang
        error.add_note(
            f"raised on data loader thread {threading.current_thread().name!r} while building "
            f"batch {index} of epoch {pass_.epoch}"
        )
        pass_.results.put((index, error, None))
    else:
        pass_.results.put((index, None, batch))


def _work(
    tasks: queue.SimpleQueue[_Task | None],
    build: Callable[[list[int]], Any],
    stopping: threading.Event,
) -> None:
    """A worker thread: build queued batches until the ``None`` sentinel."""
    # On a new thread OpenMP's team size is the core count, so BLAS calls (a matmul in the
    # batcher) would ignore torch.set_num_threads and oversubscribe the cores; this call makes
    # torch apply its intra-op setting to this thread, as it does for its own threads.
    torch.get_num_threads()
    while (task := tasks.get()) is not None:
        if not (task[0].cancelled or stopping.is_set()):
            _build_one(build, task)


class _WorkerPool:
    """``num_workers`` daemon threads taking tasks from one queue. Holds no loader reference,
    so a loader that is dropped can be collected and its finalizer can stop the pool."""

    def __init__(self, num_workers: int, build: Callable[[list[int]], Any]) -> None:
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(
                target=_work,
                args=(self._tasks, build, self._stopping),
                name=f"dataloader-{i}",
                daemon=True,
            )
            for i in range(num_workers)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def submit(self, task: _Task) -> None:
        self._tasks.put(task)

    def shutdown(self, wait: bool = True) -> None:
        """Stop the threads (queued tasks are skipped); with ``wait``, join them. Idempotent."""
        if not self._stopping.is_set():
            self._stopping.set()
            for _ in self._threads:
                self._tasks.put(None)
        if wait:
            current = threading.current_thread()  # a finalizer may run on a worker thread
            for thread in self._threads:
                if thread is not current:
                    thread.join(_JOIN_TIMEOUT_S)


class _ThreadedBatches(Generic[BatchT]):
    """The consumer side of one pass: submits batches ahead and yields them in plan order."""

    __slots__ = ("_batches", "_next", "_pass", "_pool", "_prefetch", "_ready", "_submitted")

    def __init__(
        self,
        pool: _WorkerPool,
        batches: list[list[int]],
        first: int,
        epoch: int,
        prefetch: int,
    ) -> None:
        self._pool = pool
        self._batches = batches
        self._pass = _Pass(epoch)
        self._prefetch = prefetch
        self._next = self._submitted = first
        self._ready: dict[int, _Result] = {}  # the reorder buffer
        self._submit_ahead()

    def _submit_ahead(self) -> None:
        stop = min(self._next + self._prefetch, len(self._batches))
        while self._submitted < stop:
            self._pool.submit((self._pass, self._submitted, self._batches[self._submitted]))
            self._submitted += 1

    def cancel(self) -> None:
        self._pass.cancel()
        self._ready.clear()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> BatchT:
        index = self._next
        if self._pass.cancelled or index == len(self._batches):
            raise StopIteration
        while index not in self._ready:
            result = self._pass.results.get()
            if result is _CANCELLED:
                raise StopIteration
            self._ready[result[0]] = result
        _, error, batch = self._ready.pop(index)
        self._next = index + 1
        if error is not None:
            self.cancel()
            self._pool.shutdown(wait=False)  # the threads exit; the next iter() starts new ones
            raise error
        self._submit_ahead()
        return batch  # type: ignore[no-any-return]  # built by this loader's batcher


class MultiThreadDataLoader(BatchDataLoader[ItemT, BatchT]):
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
        self._num_workers = check_int("num_workers", num_workers, minimum=1)
        self._prefetch = (
            2 * self._num_workers
            if prefetch is None
            else check_int("prefetch", prefetch, minimum=1)
        )
        super().__init__(dataset, batcher, batch_size=batch_size, seed=seed, device=device)
        self._pool: _WorkerPool | None = None
        self._stop_pool: weakref.finalize[..., Any] | None = None
        self._source: _ThreadedBatches[BatchT] | None = None

    def _fresh(self, device: torch.device) -> Self:
        return type(self)(
            self._dataset,
            self._batcher,
            num_workers=self._num_workers,
            batch_size=self._batch_size,
            seed=self._seed,
            device=device,
            prefetch=self._prefetch,
        )

    def _produce(self, batches: list[list[int]], first: int) -> Iterator[BatchT]:
        if self._source is not None:
            self._source.cancel()
        if self._pool is None or self._pool.stopped:
            if self._stop_pool is not None:
                self._stop_pool.detach()
            self._pool = pool = _WorkerPool(self._num_workers, self._build)
            self._stop_pool = weakref.finalize(self, pool.shutdown)
        self._source = _ThreadedBatches(self._pool, batches, first, self._epoch, self._prefetch)
        return self._source

    def close(self) -> None:
        """Stop and join the worker threads; the live iterator stops. Idempotent."""
        super().close()
        if self._source is not None:
            self._source.cancel()
            self._source = None
        if self._stop_pool is not None:
            self._stop_pool()

    def _describe(self) -> dict[str, object]:
        return {**super()._describe(), "num_workers": self._num_workers}
