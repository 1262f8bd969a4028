"""``StreamingDataLoader``: batches of a source read in order, whose length is unknown.

A source is anything that can be read once per pass: an iterable (a
``torch.utils.data.IterableDataset``, a Hugging Face ``datasets.IterableDataset``; ``iter()``
is called once per pass) or a function returning an iterator (called once per pass). A pass
reads its items in order on the consumer's thread and cuts them into chunks of ``batch_size``;
the batcher builds each chunk into a batch, there or on worker threads (``_threads``), so the
batches are the same for any number of workers. Reading one item ahead tells the pass which
batch is its last, so ``progress().is_completed`` is True exactly on it and a pass's
``items_total`` is known from then on (None before).

Shuffling: with a seed, items go through a buffer of ``buffer_size`` items: once it is full,
each item read replaces one drawn at random, which is emitted; the rest come out in random order
at the end of the stream. The draws are a pure function of ``(seed, stream, epoch)``, so a pass
is reproducible from the seed and the source's order. Item ``i`` of the source comes out at
position ``i - buffer_size + 1`` or later; a buffer at least as large as the pass is a uniform
shuffle of it.

Resume: a source with its own ``state_dict()``/``load_state_dict()`` (``StatefulSource``, as
Hugging Face's ``IterableDataset``) is asked for its state after each batch's items were read;
the loader's state holds the one of the last batch yielded, and a resumed pass loads it: O(1).
Every pass of such a source starts from the state it had when the loader was made. Any other
source, and any shuffled one (the buffer's items are not in the source's state), resumes by
reading the pass again and skipping the items already consumed, with a warning that says how
many.
"""

from __future__ import annotations

import copy
import functools
import itertools
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol, Self, TypeVar, runtime_checkable

import torch

from ember._checks import check_int
from ember._device import DeviceLike, as_device
from ember._errors import DataLoaderError
from ember.data import _rng as rng
from ember.data._batcher import Batcher, BatchFn
from ember.data._loader import BatchingLoader
from ember.data._multithread import worker_threads
from ember.data._pass import check_state
from ember.data._plan import Chunk

__all__ = ["STREAM_STATE_KIND", "Source", "StatefulSource", "StreamingDataLoader"]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")

STREAM_STATE_KIND = "ember.data._stream"
"""The ``kind`` tag of a ``StreamingDataLoader`` state."""

_STATE_VERSION = 1
_IDENTITY = ("kind", "version", "batch_size", "seed", "buffer_size", "stream")
_DRAWS = 4096  # buffer positions drawn at once: one numpy call per this many items
_END = object()

Source = Iterable[ItemT] | Callable[[], Iterator[ItemT]]
"""What a streaming loader reads: an iterable, or a function returning a fresh iterator."""


@runtime_checkable
class StatefulSource(Protocol):
    """A source that can say where its next ``iter()`` starts and be put back there."""

    def state_dict(self) -> dict[str, Any]:
        """Where the source stands: JSON-serialisable."""
        ...

    def load_state_dict(self, state: dict[str, Any], /) -> None:
        """Make the next ``iter()`` start where ``state`` was taken."""
        ...


def _opener(source: object) -> Callable[[], Iterator[Any]]:
    """A function starting one pass over ``source``; TypeError naming what a source must be."""
    if isinstance(source, Iterator):
        raise TypeError(
            f"source is an iterator ({type(source).__name__}), which can be read only once: pass "
            "a function that returns a new one for each pass (lambda: read(path)), or an "
            "iterable such as a torch IterableDataset"
        )
    if isinstance(source, Iterable):
        return source.__iter__
    if callable(source):

        def call() -> Iterator[Any]:
            items = source()
            if not isinstance(items, Iterator):
                raise TypeError(
                    f"the source function {source!r} returned {type(items).__name__}, not an "
                    "iterator: make it a generator function or return iter(...)"
                )
            return items

        return call
    raise TypeError(
        "source must be a Dataset (define __getitem__(int) and __len__), an iterable (a torch or "
        "Hugging Face IterableDataset) or a function returning an iterator, got "
        f"{type(source).__name__}"
    )


def structure(item: object) -> str:
    """A description of ``item``'s structure: container types, mapping keys, tuple lengths,
    tensor dtypes and leaf types (not sizes: a text's length may vary, its structure not)."""
    if isinstance(item, torch.Tensor):
        return f"Tensor[{str(item.dtype).removeprefix('torch.')}]"
    if isinstance(item, Mapping):
        fields = ", ".join(f"{key!s}: {structure(value)}" for key, value in item.items())
        return f"{type(item).__name__}{{{fields}}}"
    if isinstance(item, tuple):
        return f"{type(item).__name__}({', '.join(structure(value) for value in item)})"
    return type(item).__name__


def _outline(item: object) -> object:
    """What :func:`structure` describes, as a value compared without building the text (half
    its cost, paid by every item): equal outlines have equal structures."""
    if isinstance(item, torch.Tensor):
        return item.dtype
    if isinstance(item, Mapping):
        return (type(item), *[(str(key), _outline(value)) for key, value in item.items()])
    if isinstance(item, tuple):
        return (type(item), *[_outline(value) for value in item])
    return type(item)


def _checked(items: Iterator[Any], first: int, epoch: int) -> Iterator[Any]:
    """``items`` (numbered from ``first`` in the source), refusing one whose structure differs
    from the pass's first item: a DataLoaderError naming both, at the batch of the bad one."""
    expected: str | None = None
    outline: object = None
    reference = first
    for index, item in enumerate(items, start=first):
        if expected is None:
            expected, outline, reference = structure(item), _outline(item), index
        elif _outline(item) != outline and (found := structure(item)) != expected:
            raise DataLoaderError(
                f"item {index} of the streaming source (epoch {epoch}) is {found}, but item "
                f"{reference} was {expected}: a source must yield items of one structure "
                "(normalise them in the source, e.g. fill missing fields)"
            )
        yield item


def buffer_shuffle(items: Iterator[Any], size: int, seed: int, stream: rng.Stream) -> Iterator[Any]:
    """``items`` shuffled through a buffer of ``size`` (see the module docstring)."""
    generator = rng.generator(seed, stream)
    buffer = list(itertools.islice(items, size))
    draws: Iterator[int] = iter(())
    for item in items:
        if (position := next(draws, None)) is None:
            draws = iter(generator.integers(0, size, _DRAWS).tolist())
            position = next(draws)
        yield buffer[position]
        buffer[position] = item
    for position in generator.permutation(len(buffer)).tolist():
        yield buffer[position]


def _state_of(source: StatefulSource) -> dict[str, Any]:
    return copy.deepcopy(source.state_dict())


def _chunked(
    items: Iterator[Any],
    batch_size: int,
    first: int,
    epoch: int,
    snapshot: Callable[[], Any] | None,
) -> Iterator[Chunk]:
    """Chunks of ``batch_size`` items from batch ``first`` on, looking one item ahead so the
    last chunk knows it is last; ``snapshot`` is the source's state after each chunk's items."""
    pending = next(items, _END)
    if pending is _END:
        where = "no items" if first == 0 else f"no items left at batch {first}"
        raise DataLoaderError(
            f"the streaming source yielded {where} in epoch {epoch}"
            + ("" if first == 0 else " (was it shortened since the loader state was saved?)")
        )
    for index in itertools.count(first):
        batch = [pending, *itertools.islice(items, batch_size - 1)]
        resume = None if snapshot is None else snapshot()
        try:
            pending = _END if len(batch) < batch_size else next(items, _END)
        except Exception:
            # The look-ahead failed: this full batch still comes first, the error after it.
            yield Chunk(batch, index * batch_size, False, resume)
            raise
        yield Chunk(batch, index * batch_size, pending is _END, resume)
        if pending is _END:
            return


class StreamingDataLoader(BatchingLoader[ItemT, BatchT]):
    """Batches of ``batch_size`` items of ``source``, read in order (see the module docstring).

    ``num_items()`` is None and ``len()`` raises TypeError: the length is unknown until a pass
    ends. ``seed`` (with ``buffer_size``) shuffles through a buffer; ``num_workers`` threads
    build the batches, at most ``prefetch`` (default ``2 * num_workers``) ahead. A pass that
    reads no item, and an item whose structure differs from the pass's first one, raise
    DataLoaderError at that batch.

    State::

        {"kind": "ember.data._stream", "version": 1, "batch_size": int, "seed": int | None,
         "buffer_size": int | None, "stream": [int, ...], "epoch": int,
         "batches_consumed": int, "pass_ended": bool, "source_state": dict | None}
    """

    def __init__(
        self,
        source: Source[ItemT],
        batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT],
        *,
        batch_size: int = 1,
        seed: int | None = None,
        buffer_size: int | None = None,
        num_workers: int = 0,
        prefetch: int | None = None,
        device: DeviceLike = "cpu",
    ) -> None:
        self._open = _opener(source)
        super().__init__(None, batcher, batch_size=batch_size, seed=seed, device=device)
        if buffer_size is not None:
            buffer_size = check_int("buffer_size", buffer_size, minimum=1)
        if (self._seed is None) != (buffer_size is None):
            raise ValueError(
                "a streaming source is shuffled through a buffer: give the seed and the buffer "
                f"size together, e.g. shuffle({self._seed or 7}, buffer_size=10_000) "
                f"(got seed={self._seed}, buffer_size={buffer_size})"
            )
        self._buffer_size = buffer_size
        num_workers = check_int("num_workers", num_workers, minimum=0)
        if num_workers:
            self._threads = worker_threads(num_workers, prefetch)
        self._source = source
        self._stateful = source if isinstance(source, StatefulSource) else None
        # Where every pass of a stateful source starts: its state before the loader read it.
        self._origin = None if self._stateful is None else copy.deepcopy(source.state_dict())
        self._ended = False  # the current pass yielded its last batch
        self._pass_total: int | None = None  # the current pass's items, once it ended
        self._source_state: Any = None  # the source's state after the last batch yielded

    def _fresh(self, device: torch.device) -> Self:
        """A loader with this one's source, batcher and settings on ``device``, not started."""
        threads = self._threads
        fresh = type(self)(
            self._source,
            self._batcher,
            batch_size=self._batch_size,
            seed=self._seed,
            buffer_size=self._buffer_size,
            num_workers=0 if threads is None else threads.num_workers,
            prefetch=None if threads is None else threads.prefetch,
            device=device,
        )
        fresh._origin, fresh._stream = self._origin, self._stream
        return fresh

    def _chunks(self, first: int) -> Iterator[Chunk]:
        epoch, size = self._epoch, self._batch_size
        stateful = self._stateful if self._buffer_size is None else None
        resume = stateful is not None and first > 0 and self._source_state is not None
        if self._stateful is not None:
            start = self._source_state if resume else self._origin
            self._stateful.load_state_dict(copy.deepcopy(start))
        read = first * size if resume else 0  # the source's items before the first one read
        items = _checked(self._open(), read, epoch)
        if self._seed is not None and self._buffer_size is not None:
            items = buffer_shuffle(items, self._buffer_size, self._seed, (*self._stream, epoch))
        if first > 0 and not resume:
            warnings.warn(
                f"resuming epoch {epoch} of a streaming source at batch {first + 1}: "
                f"{'it is shuffled by a buffer' if self._buffer_size else 'it has no state_dict()'}"
                f", so the first {first * size} items of the pass will be read again and skipped",
                stacklevel=4,
            )
            items = itertools.islice(items, first * size, None)
        # The snapshot holds the source, not the loader: the threads' plan must not keep the
        # loader alive (its finalizer stops them).
        snapshot = None if stateful is None else functools.partial(_state_of, stateful)
        return _chunked(items, size, first, epoch, snapshot)

    def _note(self, chunk: Chunk) -> None:
        self._source_state = chunk.resume
        if chunk.last:
            self._ended, self._pass_total = True, chunk.start + len(chunk.payload)

    def _begin_pass(self) -> object:
        resuming = self._resume
        token = super()._begin_pass()
        if not resuming:
            self._ended, self._pass_total, self._source_state = False, None, None
        return token

    def _unfinished(self) -> bool:
        return self._epoch > 0 and not self._ended

    def __len__(self) -> int:
        raise TypeError(
            "a StreamingDataLoader has no len(): its source's length is unknown until a pass "
            "ends (num_items() is None; progress() counts the items read)"
        )

    def num_items(self) -> None:
        return None

    def _batches_per_pass(self) -> None:
        return None

    def _items_after(self, batches: int) -> int:
        items = batches * self._batch_size
        return items if self._pass_total is None else min(items, self._pass_total)

    def _items_total(self) -> int | None:
        return self._pass_total

    def to_device(self, device: DeviceLike) -> Self:
        """A loader on ``device`` over the same source, at the same position; it shares the
        source object, so iterate only one of the two at a time."""
        moved = self._fresh(as_device(device))
        moved.load_state_dict(self.state_dict())
        return moved

    def slice(self, start: int, end: int) -> Self:
        """Not possible: DataLoaderError (a stream has no item ranges to hand out)."""
        raise DataLoaderError(
            f"a StreamingDataLoader cannot be sliced (asked for items [{start}, {end})): its "
            "length is unknown. Train on one device, or with DistributedDataParallel, which "
            "shards a stream by global batch"
        )

    def state_dict(self) -> dict[str, Any]:
        """The loader's identity and position, JSON-serialisable when the source's state is."""
        return {
            "kind": STREAM_STATE_KIND,
            "version": _STATE_VERSION,
            "batch_size": self._batch_size,
            "seed": self._seed,
            "buffer_size": self._buffer_size,
            "stream": list(self._stream),
            **self._position(),
            "pass_ended": self._ended,
            "source_state": copy.deepcopy(self._source_state),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; ValueError naming the field if it belongs to another loader.

        A live iterator of this loader stops.
        """
        check_state(state, self.state_dict(), _IDENTITY)
        ended = state["pass_ended"]
        if not isinstance(ended, bool):
            raise ValueError(f"pass_ended must be a bool, got {ended!r}")
        self._ended, self._pass_total = ended, None
        self._source_state = copy.deepcopy(state["source_state"])
        self._load_position(state)

    def _describe(self) -> dict[str, object]:
        threads = self._threads
        return {
            "batch_size": self._batch_size,
            "seed": self._seed,
            "buffer_size": self._buffer_size,
            "num_workers": 0 if threads is None else threads.num_workers,
            "device": str(self._device),
            "epoch": self._epoch,
        }
