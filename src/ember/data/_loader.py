"""Data loaders: the protocol a training loop iterates, its progress, and ``BatchDataLoader``.

A loader turns a dataset into batches, one pass (epoch) per ``iter()``. ``BatchDataLoader``
builds them on the caller's thread; ``MultiThreadDataLoader`` (``_multithread.py``) is a
``BatchDataLoader`` that builds the very same batches on worker threads. This module holds, once:

* ``PassTracker``, the position every ember loader keeps: ``epoch`` (passes started) and
  ``batches_consumed`` (batches yielded by the current pass), the resume rule of a restored
  state, and close/context-manager handling; ``PassIterator`` counts what its pass yields;
* ``BatchingLoader``, what ember's own loaders share: a pass is a lazy sequence of chunks
  (``_plan.Chunk``) built into batches by one ``BatchBuilder``, on the caller's thread or on
  worker threads (``_threads``), and any builder of a chunk (a data-parallel view's) can
  follow the same pass;
* the epoch plan of ``BatchDataLoader``: pass ``k`` reads the loader's item range in order, or
  shuffled by ``rng.epoch_permutation(seed, stream, k)``, cut into batches of ``batch_size``
  with one short tail batch, each index list sliced from the permutation when it is planned
  (``_plan.EpochPlan``), so neither a pass's start nor a resume at batch ``k`` costs anything
  per batch before it; ``to_device`` keeps the stream and position (B2), ``slice`` forks the
  stream, ``load_state_dict`` restores the position (B4).

A loader is meant to be iterated by one consumer thread at a time.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Protocol, Self, TypeVar

import torch

from ember._checks import check_int, check_seed, check_slice
from ember._errors import DataLoaderError
from ember.data import _rng as rng
from ember.data._batcher import BatchBuilder, Batcher, BatchFn
from ember.data._dataset import Dataset, check_dataset
from ember.data._device import DeviceLike, as_device
from ember.data._plan import Chunk, EpochPlan
from ember.data._threads import ThreadedMap, map_chunks

__all__ = [
    "STATE_KIND",
    "BatchDataLoader",
    "BatchingLoader",
    "DataLoader",
    "DataLoaderIterator",
    "PassIterator",
    "PassTracker",
    "Progress",
    "check_state",
]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")
R = TypeVar("R")
BatchT_co = TypeVar("BatchT_co", covariant=True)

STATE_KIND = "ember.data._loader"
"""The ``kind`` tag of the state of ``BatchDataLoader`` and ``MultiThreadDataLoader``."""

_STATE_VERSION = 1

_ENDED = object()  # the token of an iterator whose pass ended with an error


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a pass has got: items consumed so far out of the pass's total.

    ``items_total`` is None while the total is unknown: a streaming pass learns it with its last
    batch, whose progress has ``items_total == items_processed``.
    """

    items_processed: int
    items_total: int | None
    unit: str | None = "items"

    @property
    def is_completed(self) -> bool:
        """Whether every item of the pass has been consumed (True exactly on its last batch)."""
        return self.items_processed == self.items_total


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


def check_state(state: Mapping[str, Any], own: Mapping[str, Any], identity: Sequence[str]) -> None:
    """Raise ValueError unless ``state`` has every field of ``own`` and agrees on ``identity``.

    The message names the field and both values, so restoring into the wrong loader (another
    dataset length, batch size or seed) says what differs.
    """
    for field in own:
        if field not in state:
            raise ValueError(f"loader state has no {field!r} field")
    for field in identity:
        saved = list(state[field]) if isinstance(state[field], tuple) else state[field]
        if saved != own[field]:
            raise ValueError(
                f"cannot load loader state: {field} is {saved!r} in the state but "
                f"{own[field]!r} in this loader"
            )


class PassTracker(ABC):
    """The position every ember loader keeps, and the rules that move it.

    ``epoch`` counts the passes started (each ``iter()`` starts the next one) and
    ``batches_consumed`` the batches yielded by the current pass. Starting a pass ends the
    previous one: its iterator stops. After ``_load_position`` of an unfinished pass, the next
    ``iter()`` resumes that pass at ``batches_consumed`` instead of starting a new one.
    """

    def __init__(self) -> None:
        self._epoch = 0
        self._consumed = 0
        self._resume = False  # the next pass continues a restored, unfinished one
        self._pass: object | None = None  # identifies the live pass; other iterators stop
        self._closed = False

    @abstractmethod
    def __len__(self) -> int:
        """The number of batches of a pass."""

    @abstractmethod
    def num_items(self) -> int | None:
        """The number of items of a pass, None when unknown."""

    @abstractmethod
    def _items_after(self, batches: int) -> int:
        """The items consumed once ``batches`` batches of a pass have been."""

    def _items_total(self) -> int | None:
        """The ``items_total`` of the current pass's progress."""
        return self.num_items()

    def _batches_per_pass(self) -> int | None:
        """The batches of a pass, None when unknown (bounds a restored ``batches_consumed``)."""
        return len(self)

    def _begin_pass(self) -> object:
        """Advance the position for a new pass (or the resumed one) and return its token."""
        if self._closed:
            raise DataLoaderError(f"cannot iterate a closed {type(self).__name__}")
        if self._resume:
            self._resume = False
        else:
            self._epoch += 1
            self._consumed = 0
        self._pass = token = object()
        return token

    def _unfinished(self) -> bool:
        return self._epoch > 0 and self._consumed < len(self)

    def _position(self) -> dict[str, int]:
        return {"epoch": self._epoch, "batches_consumed": self._consumed}

    def _load_position(self, state: Mapping[str, Any]) -> None:
        """Take the position of ``state`` (already checked by ``check_state``)."""
        epoch = check_int("epoch", state["epoch"], minimum=0)
        consumed = check_int("batches_consumed", state["batches_consumed"], minimum=0)
        limit = self._batches_per_pass()
        if (limit is not None and consumed > limit) or (epoch == 0 and consumed > 0):
            bound = "" if limit is None else f"<= {limit} (the batches of a pass) and "
            raise ValueError(
                f"batches_consumed must be {bound}0 before the first epoch, got {consumed} at "
                f"epoch {epoch}"
            )
        self._epoch, self._consumed = epoch, consumed
        self._resume = self._unfinished()
        self._pass = None

    def close(self) -> None:
        """Mark the loader closed: its live iterator stops and it cannot be iterated again."""
        self._closed = True
        self._pass = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class PassIterator(Generic[BatchT]):
    """One pass of a ``PassTracker``: yields ``batches``, counts them, reports progress.

    It stops when its loader starts another pass or is closed, and after an error (the position
    still points at the failed batch, so a restored state retries it).
    """

    __slots__ = ("_batches", "_done", "_loader", "_token")

    def __init__(self, loader: PassTracker, token: object, batches: Iterator[BatchT]) -> None:
        self._loader = loader
        self._token = token
        self._batches = batches
        self._done = loader._consumed  # a resumed pass counts the skipped batches as done

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> BatchT:
        loader = self._loader
        if loader._pass is not self._token:
            self._batches = iter(())  # drop the source (and the threads' or processes' batches)
            raise StopIteration
        try:
            batch = next(self._batches)
        except BaseException as error:
            if not isinstance(error, StopIteration):
                self._token = _ENDED
            raise
        self._done += 1
        loader._consumed = self._done
        return batch

    def progress(self) -> Progress:
        return Progress(self._loader._items_after(self._done), self._loader._items_total())


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

        {"kind": "ember.data._loader", "version": 1, "num_items": int, "batch_size": int,
         "seed": int | None, "stream": [int, ...], "epoch": int, "batches_consumed": int}

    A loader restored from a state yields exactly the batches the saved loader would have
    yielded next: if its pass was unfinished, the next ``iter()`` resumes that epoch at the next
    batch (the skipped items count as processed in ``progress()``; they are neither read nor
    batched); otherwise it starts the next epoch. A state from another dataset length, batch
    size, seed or stream is refused.
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
        them: a lazy sequence (only the epoch's permutation is computed). Pure, it moves
        nothing."""
        epoch = check_int("epoch", epoch, minimum=1)
        n = self._end - self._start
        order = (
            None
            if self._seed is None
            else rng.epoch_permutation(self._seed, self._stream, epoch, n)
        )
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
        """A loader on ``device`` with the same data, seed, stream and position (B2).

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
        check_state(
            state,
            self.state_dict(),
            ("kind", "version", "num_items", "batch_size", "seed", "stream"),
        )
        self._load_position(state)
