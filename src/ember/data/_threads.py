"""Worker threads that build a pass's batches ahead, handed out in the order they were planned.

A loader plans its pass on the consumer's thread (the index lists of a map-style dataset, or
the items read from a stream) and only the *building* of each batch (fetching items, calling
the batcher) moves to the threads ("same batches")::

    consumer (iter/next)                               threads dataloader-0 .. dataloader-{n-1}
    pull planned chunks first .. first+prefetch-1  ──tasks──►  fn(chunk) for any queued task
    next(): wait for chunk j in the reorder        ◄─results─  (j, error, result), any order
            buffer, pull and submit chunk j+prefetch

So the results equal ``map(fn, chunks)`` whatever the number of workers, and at most
``prefetch`` of them exist at a time. The plan is pulled lazily: a pass of ten million items
plans only the chunks that are ``prefetch`` ahead of the consumer. An error raised while
pulling the plan (a stream's read error) is kept as the result of that chunk, so it reaches the
consumer after every earlier result, as it would without threads.

Lifecycle: the threads are daemons, started by the first ``map`` and reused by later ones. A new
``map`` cancels the unfinished one (its queued tasks are skipped). An error raised by ``fn`` on
a thread is re-raised by the consumer's ``next()`` at that chunk's place, as the same exception
object with a note naming the thread and the batch; the map then ends and the threads exit (a
later ``map`` starts new ones). ``close()`` and garbage collection of the ``ThreadedMap`` stop
the threads too.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Generic, Self, TypeVar

import torch

__all__ = ["ThreadedMap", "map_chunks"]

A = TypeVar("A")
R = TypeVar("R")

_JOIN_TIMEOUT_S = 10.0  # close() waits this long for a thread to finish the batch it is building

_Result = tuple[int, BaseException | None, Any]  # (chunk index, error, result)
_CANCELLED: _Result = (-1, None, None)  # wakes a consumer waiting on a cancelled pass


class _Pass:
    """One map as the threads see it: where its results go, and whether it was cancelled."""

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


_Task = tuple[_Pass, int, Callable[[Any], Any], Any]


def _run_one(task: _Task) -> None:
    """Run one task and post its result or error (a function, so no local keeps it)."""
    pass_, index, fn, chunk = task
    try:
        result = fn(chunk)
    except BaseException as error:  # everything goes to the consumer, which must never hang
        error.add_note(
            f"raised on data loader thread {threading.current_thread().name!r} while building "
            f"batch {index} of epoch {pass_.epoch}"
        )
        pass_.results.put((index, error, None))
    else:
        pass_.results.put((index, None, result))


def _work(tasks: queue.SimpleQueue[_Task | None], stopping: threading.Event) -> None:
    """A worker thread: run queued tasks until the ``None`` sentinel."""
    # On a new thread OpenMP's team size is the core count, so BLAS calls (a matmul in the
    # batcher) would ignore torch.set_num_threads and oversubscribe the cores; this call makes
    # torch apply its intra-op setting to this thread, as it does for its own threads.
    torch.get_num_threads()
    while (task := tasks.get()) is not None:
        if not (task[0].cancelled or stopping.is_set()):
            _run_one(task)


class _WorkerPool:
    """``num_workers`` daemon threads taking tasks from one queue. Holds no loader reference,
    so a loader that is dropped can be collected and its finalizer can stop the pool."""

    def __init__(self, num_workers: int) -> None:
        self._tasks: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(
                target=_work,
                args=(self._tasks, self._stopping),
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


class _Ordered(Generic[R]):
    """The consumer side of one map: pulls chunks ahead, submits them, yields results in order."""

    __slots__ = ("_chunks", "_fn", "_next", "_pass", "_pool", "_prefetch", "_ready", "_submitted")

    def __init__(
        self,
        pool: _WorkerPool,
        fn: Callable[[Any], R],
        chunks: Iterator[Any],
        epoch: int,
        first: int,
        prefetch: int,
    ) -> None:
        self._pool = pool
        self._fn = fn
        self._chunks: Iterator[Any] | None = chunks  # None once exhausted
        self._pass = _Pass(epoch)
        self._prefetch = prefetch
        self._next = self._submitted = first  # indexes count from the pass's first batch
        self._ready: dict[int, _Result] = {}  # the reorder buffer
        self._submit_ahead()

    def _submit_ahead(self) -> None:
        while self._chunks is not None and self._submitted < self._next + self._prefetch:
            index = self._submitted
            try:
                chunk = next(self._chunks)
            except StopIteration:
                self._chunks = None
                return
            except Exception as error:  # the plan's own error comes out at its place
                self._chunks = None
                self._ready[index] = (index, error, None)
                self._submitted += 1
                return
            self._pool.submit((self._pass, index, self._fn, chunk))
            self._submitted += 1

    def cancel(self) -> None:
        self._pass.cancel()
        self._ready.clear()
        self._chunks = None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> R:
        index = self._next
        if self._pass.cancelled or index == self._submitted:
            raise StopIteration
        while index not in self._ready:
            result = self._pass.results.get()
            if result is _CANCELLED:
                raise StopIteration
            self._ready[result[0]] = result
        _, error, value = self._ready.pop(index)
        self._next = index + 1
        if error is not None:
            self.cancel()
            self._pool.shutdown(wait=False)  # the threads exit; the next map starts new ones
            raise error
        self._submit_ahead()
        return value  # type: ignore[no-any-return]  # made by fn


class ThreadedMap:
    """``num_workers`` threads running ``map(fn, chunks)`` at most ``prefetch`` chunks ahead.

    One map is live at a time: a new ``map`` cancels the previous one. See the module docstring
    for the threads' lifecycle and errors.
    """

    def __init__(self, num_workers: int, prefetch: int) -> None:
        self.num_workers = num_workers
        self.prefetch = prefetch
        self._pool: _WorkerPool | None = None
        self._stop_pool: weakref.finalize[..., Any] | None = None
        self._live: _Ordered[Any] | None = None

    def map(self, fn: Callable[[A], R], chunks: Iterator[A], epoch: int, first: int) -> Iterator[R]:
        """``fn`` of every chunk, in order; chunk indexes (in error notes) start at ``first``."""
        self.cancel()
        if self._pool is None or self._pool.stopped:
            if self._stop_pool is not None:
                self._stop_pool.detach()
            self._pool = pool = _WorkerPool(self.num_workers)
            self._stop_pool = weakref.finalize(self, pool.shutdown)
        self._live = _Ordered(self._pool, fn, chunks, epoch, first, self.prefetch)
        return self._live

    def cancel(self) -> None:
        """End the live map: its iterator stops and its queued tasks are skipped."""
        if self._live is not None:
            self._live.cancel()
            self._live = None

    def close(self) -> None:
        """Cancel the live map, then stop and join the threads. Idempotent."""
        self.cancel()
        if self._stop_pool is not None:
            self._stop_pool()


def map_chunks(
    threads: ThreadedMap | None, fn: Callable[[A], R], chunks: Iterator[A], epoch: int, first: int
) -> Iterator[R]:
    """``map(fn, chunks)`` on the caller's thread, or on ``threads`` when there are any; an
    error carries a note naming the batch and the epoch either way."""
    if threads is None:
        return _inline(fn, chunks, epoch, first)
    return threads.map(fn, chunks, epoch, first)


def _inline(fn: Callable[[A], R], chunks: Iterator[A], epoch: int, first: int) -> Iterator[R]:
    for index, chunk in enumerate(chunks, start=first):
        try:
            result = fn(chunk)
        except BaseException as error:
            error.add_note(f"raised while building batch {index} of epoch {epoch}")
            raise
        yield result
