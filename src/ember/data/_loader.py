"""Data loaders: the protocol a training loop iterates, its progress, and ``BatchDataLoader``.

A loader turns a dataset into batches, one pass (epoch) per ``iter()``. ``BatchDataLoader``
builds them on the caller's thread; ``MultiThreadDataLoader`` (``multithread.py``) is a
``BatchDataLoader`` that builds the very same batches on worker threads. This module holds, once:

* ``PassTracker``, the position every ember loader keeps: ``epoch`` (passes started) and
  ``batches_consumed`` (batches yielded by the current pass), the resume rule of a restored
  state, and close/context-manager handling; ``PassIterator`` counts what its pass yields;
* the epoch plan of ``BatchDataLoader``: pass ``k`` reads the loader's item range in order, or
  shuffled by ``rng.epoch_permutation(seed, stream, k)``, cut into batches of ``batch_size``
  with one short tail batch; ``to_device`` keeps the stream and position (B2), ``slice`` forks
  the stream, ``load_state_dict`` restores the position (B4).

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

__all__ = [
    "STATE_KIND",
    "BatchDataLoader",
    "DataLoader",
    "DataLoaderIterator",
    "PassIterator",
    "PassTracker",
    "Progress",
    "check_state",
]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")
BatchT_co = TypeVar("BatchT_co", covariant=True)

STATE_KIND = "ember.data._loader"
"""The ``kind`` tag of the state of ``BatchDataLoader`` and ``MultiThreadDataLoader``."""

_STATE_VERSION = 1

_ENDED = object()  # the token of an iterator whose pass ended with an error


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a pass has got: items consumed so far out of the pass's total."""

    items_processed: int
    items_total: int
    unit: str | None = "items"

    @property
    def is_completed(self) -> bool:
        """Whether every item of the pass has been consumed."""
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
        """The number of batches of a pass."""
        ...

    def num_items(self) -> int:
        """The number of items of a pass (the ``items_total`` of its progress)."""
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
    def num_items(self) -> int:
        """The number of items of a pass."""

    @abstractmethod
    def _items_after(self, batches: int) -> int:
        """The items consumed once ``batches`` batches of a pass have been."""

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
        if consumed > len(self) or (epoch == 0 and consumed > 0):
            raise ValueError(
                f"batches_consumed must be <= {len(self)} (the batches of a pass) and 0 before "
                f"the first epoch, got {consumed} at epoch {epoch}"
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
        return Progress(self._loader._items_after(self._done), self._loader.num_items())


class BatchDataLoader(PassTracker, Generic[ItemT, BatchT]):
    """Batches of ``dataset`` built by ``batcher`` on ``device``, on the caller's thread.

    Each ``iter()`` starts the next epoch: the items in order, or, with a ``seed``, in a fresh
    permutation that is a pure function of the seed and the epoch number. Every batch has
    ``batch_size`` items except a shorter last one.

    State (``state_dict``/``load_state_dict``; ``MultiThreadDataLoader`` has the same)::

        {"kind": "ember.data._loader", "version": 1, "num_items": int, "batch_size": int,
         "seed": int | None, "stream": [int, ...], "epoch": int, "batches_consumed": int}

    A loader restored from a state yields exactly the batches the saved loader would have
    yielded next: if its pass was unfinished, the next ``iter()`` resumes that epoch at the next
    batch (the skipped items count as processed in ``progress()``); otherwise it starts the next
    epoch. A state from another dataset length, batch size, seed or stream is refused.
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
        super().__init__()
        check_dataset(dataset)
        self._batch_size = check_int("batch_size", batch_size, minimum=1)
        self._seed = None if seed is None else check_seed(seed)
        self._device = as_device(device)
        self._build: BatchBuilder[ItemT, BatchT] = BatchBuilder(dataset, batcher, self._device)
        if len(dataset) == 0:
            raise ValueError("dataset is empty (len 0): a loader needs at least one item")
        self._dataset = dataset
        self._batcher = batcher
        # The item range read and the random stream: a slice narrows the first, forks the second.
        self._start, self._end = 0, len(dataset)
        self._stream: rng.Stream = rng.LOADER_STREAM

    def _fresh(self, device: torch.device) -> Self:
        """A loader with this one's dataset, batcher and settings on ``device``, not started."""
        return type(self)(
            self._dataset,
            self._batcher,
            batch_size=self._batch_size,
            seed=self._seed,
            device=device,
        )

    def _produce(self, batches: list[list[int]], first: int) -> Iterator[BatchT]:
        """The batches for ``batches[first:]``, in order (overridden to build them on threads).

        An error building one carries a note naming the batch and the epoch, as one raised on a
        worker thread does."""
        return _built(self._build, batches, first, self._epoch)

    def _epoch_batches(self, epoch: int) -> list[list[int]]:
        """The dataset indexes of every batch of pass ``epoch``."""
        import numpy as np  # lazy: keeps `import ember` fast (B10)

        n, size = self._end - self._start, self._batch_size
        if self._seed is None:
            order = np.arange(self._start, self._end)
        else:
            order = rng.epoch_permutation(self._seed, self._stream, epoch, n) + self._start
        full = n - n % size
        # One tolist() of a 2-D array builds all the index lists in C.
        batches: list[list[int]] = order[:full].reshape(-1, size).tolist()
        if full < n:
            batches.append(order[full:].tolist())
        return batches

    def __iter__(self) -> DataLoaderIterator[BatchT]:
        token = self._begin_pass()
        batches = self._produce(self._epoch_batches(self._epoch), self._consumed)
        return PassIterator(self, token, batches)

    def epoch_plan(self, epoch: int) -> list[list[int]]:
        """The dataset indexes of every batch of pass ``epoch`` (1-based), as ``iter()`` reads
        them. For views that follow this loader's plan (``ember.data._shard``); pure, it moves
        nothing."""
        return self._epoch_batches(check_int("epoch", epoch, minimum=1))

    def build_batches(self, plan: list[list[int]]) -> Iterator[BatchT]:
        """Build one batch per index list of ``plan``, in order, as a pass builds its batches
        (on the worker threads of a ``MultiThreadDataLoader``, whose live pass it cancels).
        For views that follow this loader's plan; the loader's position does not move."""
        return self._produce(plan, 0)

    def __len__(self) -> int:
        return -(-self.num_items() // self._batch_size)

    def num_items(self) -> int:
        return self._end - self._start

    def _items_after(self, batches: int) -> int:
        return min(batches * self._batch_size, self.num_items())

    @property
    def device(self) -> torch.device:
        return self._device

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


def _built(
    build: Callable[[list[int]], BatchT], batches: list[list[int]], first: int, epoch: int
) -> Iterator[BatchT]:
    """``build`` of each of ``batches[first:]``; an error is noted with its batch and epoch."""
    for index in range(first, len(batches)):
        try:
            batch = build(batches[index])
        except BaseException as error:
            error.add_note(f"raised while building batch {index} of epoch {epoch}")
            raise
        yield batch
