"""One rank's view of a loader in a data-parallel job: its share of every global batch.

In data-parallel training the loader the user builds keeps its meaning: its batch size is the
**global** batch, and every rank follows its epoch plan (the same permutation, the same global
batches). ``ShardedDataLoader(loader, rank, world_size)`` yields, for each global batch of that
plan, the contiguous part of its indexes that belongs to ``rank``::

    global batch of n items, w ranks:  sizes  n // w + (1 if r < n % w else 0)   (share_sizes)
                                       rank r reads items [sum(sizes[:r]), sum(sizes[:r + 1]))

So the shares, concatenated in rank order, are exactly the global batch: no item is duplicated,
dropped or padded, a short tail batch is split as evenly as possible, and rank 0 always has the
largest share. A share can be empty (a tail batch with fewer items than ranks, or a batch size
below the world size): the view then yields ``None`` in its place, so that every rank still sees
one entry per global batch and collectives stay matched.

Everything that describes the pass is the global loader's: ``len`` (global batches),
``num_items``, ``progress()`` and ``state_dict()`` (a state saved by one rank restores every
rank, or the unsharded loader). ``ShardIterator.shares`` gives the share sizes of all ranks for
the entry just returned, which a data-parallel step needs to weight its gradients and outputs.

Shardable loaders are ember's own: ``BatchDataLoader``, ``MultiThreadDataLoader`` and
``StreamingDataLoader`` (the view follows their passes through ``follow_pass``, building only
its share of each chunk). A stream is sharded the same way, by global batch: every rank reads
every item of the stream (in the same order, from its own copy of the loader) and batches only
its share, so every rank sees the same number of global batches, the same last batch, and the
same resume position. Reading is what every rank repeats; decoding and collating, done by the
batcher, are not. A ``TorchDataLoader`` has no plan to share (use torch's
``DistributedSampler`` there).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Generic, Self, TypeVar

import torch

from ember._checks import check_int
from ember._closing import ClosesOnExit
from ember._device import DeviceLike
from ember.data._loader import BatchingLoader
from ember.data._pass import PassIterator, Progress

__all__ = ["ShardIterator", "ShardedDataLoader", "share_bounds", "share_sizes"]

BatchT = TypeVar("BatchT")

_Entry = tuple[Any, tuple[int, ...]]  # (this rank's batch or None, every rank's share size)


def share_sizes(items: int, world_size: int) -> tuple[int, ...]:
    """How many of a batch's ``items`` each of ``world_size`` ranks gets (the first
    ``items % world_size`` ranks take one more)."""
    base, extra = divmod(items, world_size)
    return tuple(base + (1 if rank < extra else 0) for rank in range(world_size))


def share_bounds(items: int, rank: int, world_size: int) -> tuple[int, int]:
    """The ``[start, end)`` positions of ``rank``'s share in a batch of ``items``."""
    base, extra = divmod(items, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


class ShardIterator(Generic[BatchT]):
    """One pass of a :class:`ShardedDataLoader`: this rank's batch (or None) per global batch."""

    __slots__ = ("_pass", "_shares")

    def __init__(self, pass_: PassIterator[_Entry]) -> None:
        self._pass = pass_
        self._shares: tuple[int, ...] = ()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> BatchT | None:
        batch, self._shares = next(self._pass)
        return batch  # type: ignore[no-any-return]  # built by the loader's batcher, or None

    def progress(self) -> Progress:
        """The global loader's progress: items of the global batches consumed so far."""
        return self._pass.progress()

    @property
    def shares(self) -> tuple[int, ...]:
        """Every rank's share size of the global batch just returned (empty before the first)."""
        return self._shares


class _Share(Generic[BatchT]):
    """Builds ``rank``'s share of a global chunk (no loader reference, for the threads)."""

    __slots__ = ("_build", "_rank", "_world_size")

    def __init__(self, build: Callable[[list[Any]], BatchT], rank: int, world_size: int) -> None:
        self._build = build
        self._rank = rank
        self._world_size = world_size

    def __call__(self, chunk: list[Any]) -> _Entry:
        start, end = share_bounds(len(chunk), self._rank, self._world_size)
        share = chunk[start:end]
        return (self._build(share) if share else None), share_sizes(len(chunk), self._world_size)


class ShardedDataLoader(ClosesOnExit, Generic[BatchT]):
    """``rank``'s share of every global batch of ``loader`` (see the module docstring).

    It starts where ``loader`` stands (its epoch, seed, stream and position) on a copy of it,
    so ``loader`` itself is never advanced. It yields ``BatchT`` for a non-empty share and
    ``None`` for an empty one.
    """

    def __init__(self, loader: BatchingLoader[Any, BatchT], rank: int, world_size: int) -> None:
        if not isinstance(loader, BatchingLoader):
            raise TypeError(
                "only ember's BatchDataLoader, MultiThreadDataLoader or StreamingDataLoader can "
                "be sharded (a TorchDataLoader has no epoch plan: use torch's "
                f"DistributedSampler), got {type(loader).__name__}"
            )
        self._world_size = check_int("world_size", world_size, minimum=1)
        self._rank = check_int("rank", rank, minimum=0)
        if self._rank >= self._world_size:
            raise ValueError(f"rank must be < world_size ({self._world_size}), got {rank}")
        # Our own copy, at the loader's position, with its own threads: the view's position is
        # the copy's, and the loader is never advanced.
        self._loader: BatchingLoader[Any, BatchT] = loader.to_device(loader.device)

    @property
    def rank(self) -> int:
        """The rank whose shares this view yields."""
        return self._rank

    @property
    def world_size(self) -> int:
        """The number of ranks the global batches are split between."""
        return self._world_size

    def __iter__(self) -> ShardIterator[BatchT]:
        share = _Share(self._loader.builder, self._rank, self._world_size)
        return ShardIterator(self._loader.follow_pass(share))

    def __len__(self) -> int:
        return len(self._loader)

    def num_items(self) -> int | None:
        return self._loader.num_items()

    @property
    def device(self) -> torch.device:
        return self._loader.device

    def to_device(self, device: DeviceLike) -> ShardedDataLoader[BatchT]:
        """The same view on ``device``, at the same position."""
        return ShardedDataLoader(self._loader.to_device(device), self._rank, self._world_size)

    def slice(self, start: int, end: int) -> ShardedDataLoader[BatchT]:
        """The same rank's view of ``loader.slice(start, end)`` (which starts at epoch 0)."""
        return ShardedDataLoader(self._loader.slice(start, end), self._rank, self._world_size)

    def state_dict(self) -> dict[str, Any]:
        """The global loader's state at this view's position (the same on every rank)."""
        return self._loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a state of this view, of any other rank's view, or of the loader."""
        self._loader.load_state_dict(state)  # checks it is this loader's (length, seed, ...)

    def close(self) -> None:
        """Stop the copy's worker threads; the live iterator stops. Idempotent."""
        self._loader.close()

    def __repr__(self) -> str:
        return (
            f"ShardedDataLoader({self._loader!r}, rank={self._rank}, world_size={self._world_size})"
        )
