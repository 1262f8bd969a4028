"""Data loaders: the protocol a training loop iterates, its progress, and ``BatchDataLoader``.

A loader turns a dataset into batches, one pass (epoch) per ``iter()``. ``BatchDataLoader``
builds them on the caller's thread; ``MultiThreadDataLoader`` (``_multithread.py``) is a
``BatchDataLoader`` that builds the very same batches on worker threads. This module holds, once:

* the ``DataLoader`` protocol (the position and progress every loader keeps are ``_pass``'s);
* ``BatchingLoader``, what ember's own loaders share: a pass is a lazy sequence of chunks
  (``_plan.Chunk``) built into batches by one ``BatchBuilder``, on the caller's thread or on
  worker threads (``_threads``), and any builder of a chunk (a data-parallel view's) can
  follow the same pass;
* the epoch plan of ``BatchDataLoader``: pass ``k`` reads the loader's item range in order, or
  shuffled by ``rng.epoch_order(seed, stream, k, n)``, cut into batches of ``batch_size``
  with one short tail batch, each index list taken from the order when it is planned
  (``_plan.EpochPlan``), so neither a pass's start nor a resume at batch ``k`` costs anything
  per batch before it; ``to_device`` keeps the stream and position ("stable stream"),
  ``slice`` forks the stream, ``load_state_dict`` restores the position ("exact resume").

A loader is meant to be iterated by one consumer thread at a time.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, Self, TypeVar

import torch

from ember._checks import check_int, check_seed, check_slice
from ember._device import DeviceLike, as_device
from ember.data import _rng as rng
from ember.data._batcher import BatchBuilder, Batcher, BatchFn
from ember.data._dataset import Dataset, check_dataset
from ember.data._pass import PassIterator, PassTracker, Progress, check_state
from ember.data._plan import Chunk, EpochPlan
from ember.data._threads import ThreadedMap, map_chunks

__all__ = [
    "STATE_KIND",
    "BatchDataLoader",
    "BatchingLoader",
    "DataLoader",
    "DataLoaderIterator",
]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")
R = TypeVar("R")
BatchT_co = TypeVar("BatchT_co", covariant=True)

STATE_KIND = "ember.data._loader"
"""The ``kind`` tag of the state of ``BatchDataLoader`` and ``MultiThreadDataLoader``."""

_STATE_VERSION = 2
"""2: a shuffled pass of more than ``rng.FULL_PERMUTATION_ITEMS`` items follows the lazy
``rng.FeistelOrder``. 1 (ember before it): it followed numpy's full permutation, another order,
so a version-1 state of such a pass left mid-way cannot go on with the batches it began with
and is refused; any other version-1 state loads as it is (its order did not change)."""


class DataLoaderIterator(Iterator[BatchT_co], Protocol[BatchT_co]):
    """One pass over a loader's data."""

    def progress(self) -> Progress:
        """Items consumed so far, including the batch just returned."""
        ...


class DataLoader(Protocol[BatchT_co]):
    """What a training loop iterates: batches, one pass per ``iter()``."""

    def __iter__(self) -> DataLoaderIterator[BatchT_co]:
        """Start a new pass (the next epoch)."""
        ...

    def __len__(self) -> int:
        """The number of batches of a pass (TypeError when unknown: a streaming loader)."""
        ...

    def num_items(self) -> int | None:
        """The number of items of a pass, None when unknown before the pass ends (streaming)."""
        ...

    @property
    def device(self) -> torch.device:
        """The device the batches are put on."""
        ...

    def to_device(self, device: DeviceLike) -> DataLoader[BatchT_co]:
        """A loader yielding the batches this one would yield next, on ``device``."""
        ...

    def slice(self, start: int, end: int) -> DataLoader[BatchT_co]:
        """A loader over items ``[start, end)`` of the unshuffled data, with its own stream."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The loader's position, JSON-serialisable."""
        ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a position saved by ``state_dict``."""
        ...

    def close(self) -> None:
        """Release worker threads or processes; idempotent."""
        ...


class _Tagged(Generic[R]):
    """``build`` of a chunk's payload, with the chunk (no loader reference, for the threads)."""

    __slots__ = ("_build",)

    def __init__(self, build: Callable[[list[Any]], R]) -> None:
        self._build = build

    def __call__(self, chunk: Chunk) -> tuple[Chunk, R]:
        return chunk, self._build(chunk.payload)


class BatchingLoader(PassTracker, Generic[ItemT, BatchT]):
    """What ember's own loaders share: a pass is a lazy sequence of chunks planned on the
    caller's thread (``_chunks``) and built into batches by one ``BatchBuilder``, there or on
    worker threads (``_threads``). ``follow_pass`` runs the same pass with another builder."""

    def __init__(
        self,
        dataset: Dataset[ItemT] | None,
        batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT],
        *,
        batch_size: int,
        seed: int | None,
        device: DeviceLike,
    ) -> None:
        super().__init__()
        self._batch_size = check_int("batch_size", batch_size, minimum=1)
        self._seed = None if seed is None else check_seed(seed)
        self._device = as_device(device)
        self._build: BatchBuilder[ItemT, BatchT] = BatchBuilder(dataset, batcher, self._device)
        self._batcher = batcher
        self._stream: rng.Stream = rng.LOADER_STREAM
        self._threads: ThreadedMap | None = None  # set by loaders that build on worker threads

    @abstractmethod
    def _chunks(self, first: int) -> Iterator[Chunk]:
        """The chunks of the current pass (``self._epoch``) from its batch ``first`` on."""

    @abstractmethod
    def to_device(self, device: DeviceLike) -> Self:
        """A loader on ``device`` yielding the batches this one would yield next."""

    @abstractmethod
    def slice(self, start: int, end: int) -> Self:
        """A loader over items ``[start, end)``, with its own stream."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The loader's identity and position, JSON-serialisable."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a position saved by ``state_dict``."""

    def _note(self, chunk: Chunk) -> None:
        """Called as the batch of ``chunk`` is yielded (a streaming loader records its end)."""

    def follow_pass(self, build: Callable[[list[Any]], R]) -> PassIterator[R]:
        """Start the next pass (or resume the restored one) as ``iter()`` does, yielding
        ``build(chunk payload)`` for each of its chunks: a batch's dataset indexes, or a
        streaming batch's items. For views of this loader's passes (``ember.data._shard``)."""
        token = self._begin_pass()
        first = self._consumed
        results = map_chunks(self._threads, _Tagged(build), self._chunks(first), self._epoch, first)
        return PassIterator(self, token, self._noted(results))

    def _noted(self, results: Iterator[tuple[Chunk, R]]) -> Iterator[R]:
        for chunk, result in results:
            self._note(chunk)
            yield result

    def __iter__(self) -> DataLoaderIterator[BatchT]:
        return self.follow_pass(self._build)

    @property
    def builder(self) -> Callable[[list[Any]], BatchT]:
        """What builds a batch from a chunk's payload (for views that build parts of chunks)."""
        return self._build

    @property
    def device(self) -> torch.device:
        return self._device

    def close(self) -> None:
        """Stop and join the worker threads, if any; the live iterator stops. Idempotent."""
        super().close()
        if self._threads is not None:
            self._threads.close()

    def _describe(self) -> dict[str, object]:
        """The settings ``repr`` shows."""
        return {
            "num_items": self.num_items(),
            "batch_size": self._batch_size,
            "seed": self._seed,
            "device": str(self._device),
            "epoch": self._epoch,
        }

    def __repr__(self) -> str:
        settings = ", ".join(f"{key}={value!r}" for key, value in self._describe().items())
        return f"{type(self).__name__}({settings})"


class BatchDataLoader(BatchingLoader[ItemT, BatchT]):
    """Batches of ``dataset`` built by ``batcher`` on ``device``, on the caller's thread.

    Each ``iter()`` starts the next epoch: the items in order, or, with a ``seed``, in a fresh
    permutation that is a pure function of the seed and the epoch number. Every batch has
    ``batch_size`` items except a shorter last one.

    State (``state_dict``/``load_state_dict``; ``MultiThreadDataLoader`` has the same)::

        {"kind": "ember.data._loader", "version": 2, "num_items": int, "batch_size": int,
         "seed": int | None, "stream": [int, ...], "epoch": int, "batches_consumed": int}

    A loader restored from a state yields exactly the batches the saved loader would have
    yielded next: if its pass was unfinished, the next ``iter()`` resumes that epoch at the next
    batch (the skipped items count as processed in ``progress()``; they are neither read nor
    batched); otherwise it starts the next epoch. A state from another dataset length, batch
    size, seed or stream is refused, and so is a version-1 state (an older ember's) of a
    shuffled pass of more than 65,536 items left mid-way: its order was another one.
    """

    def __init__(
        self,
        dataset: Dataset[ItemT],
        batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT],
        *,
        batch_size: int = 1,
        seed: int | None = None,
        device: DeviceLike = "cpu",
    ) -> None:
        check_dataset(dataset)
        super().__init__(dataset, batcher, batch_size=batch_size, seed=seed, device=device)
        if len(dataset) == 0:
            raise ValueError("dataset is empty (len 0): a loader needs at least one item")
        self._dataset = dataset
        # The item range read and the random stream: a slice narrows the first, forks the second.
        self._start, self._end = 0, len(dataset)

    def _fresh(self, device: torch.device) -> Self:
        """A loader with this one's dataset, batcher and settings on ``device``, not started."""
        return type(self)(
            self._dataset,
            self._batcher,
            batch_size=self._batch_size,
            seed=self._seed,
            device=device,
        )

    def epoch_plan(self, epoch: int) -> EpochPlan:
        """The dataset indexes of every batch of pass ``epoch`` (1-based), as ``iter()`` reads
        them: a lazy sequence (nothing is computed before a batch is asked for). Pure, it moves
        nothing."""
        epoch = check_int("epoch", epoch, minimum=1)
        n = self._end - self._start
        order = None if self._seed is None else rng.epoch_order(self._seed, self._stream, epoch, n)
        return EpochPlan(order, self._start, n, self._batch_size)

    def _chunks(self, first: int) -> Iterator[Chunk]:
        return self.epoch_plan(self._epoch).chunks(first)

    def __len__(self) -> int:
        return -(-self.num_items() // self._batch_size)

    def num_items(self) -> int:
        return self._end - self._start

    def _items_after(self, batches: int) -> int:
        return min(batches * self._batch_size, self.num_items())

    def to_device(self, device: DeviceLike) -> Self:
        """A loader on ``device`` with the same data, seed, stream and position ("stable stream").

        It yields exactly the batches this one would yield next; this one is not advanced.
        """
        moved = self._fresh(as_device(device))
        moved._start, moved._end, moved._stream = self._start, self._end, self._stream
        moved.load_state_dict(self.state_dict())
        return moved

    def slice(self, start: int, end: int) -> Self:
        """A loader over items ``[start, end)`` of this loader's unshuffled data.

        Same batch size, batcher and device; its shuffle stream is derived from this one's and
        ``(start, end)``, so it is independent of its siblings; it starts at epoch 0.
        """
        start, end = check_slice(start, end, self.num_items())
        child = self._fresh(self._device)
        child._start, child._end = self._start + start, self._start + end
        child._stream = rng.slice_stream(self._stream, start, end)
        return child

    def state_dict(self) -> dict[str, Any]:
        """The loader's identity and position, JSON-serialisable (see the class docstring)."""
        return {
            "kind": STATE_KIND,
            "version": _STATE_VERSION,
            "num_items": self.num_items(),
            "batch_size": self._batch_size,
            "seed": self._seed,
            "stream": list(self._stream),
            **self._position(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; ValueError naming the field if it belongs to another loader.

        A live iterator of this loader stops.
        """
        check_state(state, self.state_dict(), ("kind", "num_items", "batch_size", "seed", "stream"))
        version, consumed = state["version"], state["batches_consumed"]
        if version not in (1, _STATE_VERSION):
            raise ValueError(
                f"cannot load loader state: its version is {version!r}; this ember reads "
                f"versions 1 and {_STATE_VERSION}"
            )
        mid_pass = isinstance(consumed, int) and 0 < consumed < len(self)
        lazy = self._seed is not None and self.num_items() > rng.FULL_PERMUTATION_ITEMS
        if version == 1 and lazy and mid_pass:
            raise ValueError(
                f"cannot load loader state: it was saved by an older ember (state version 1) "
                f"in the middle of shuffled pass {state['epoch']} (after batch {consumed}), and "
                "this ember shuffles in another order, so the pass cannot go on with the batches "
                "it began with; resume from a state saved at the end of a pass (an epoch "
                "checkpoint), or start the pass again"
            )
        self._load_position(state)
