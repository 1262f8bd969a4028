"""A user's ``TorchDataLoader`` under ``DistributedDataParallel``: this rank's shares.

A torch ``DataLoader`` has no epoch plan ember could share, but its sampler has one: each pass,
:class:`TorchShares` draws the pass's plan of global batches from the user's loader and rebuilds
the torch loader (same dataset, workers, collate, generator) over a batch sampler that yields
only this rank's indices of each unit, so torch loads and collates only the share. Two plans:

- **a plain sampler** (``batch_size``/``shuffle``, or any sampler under a ``BatchSampler``):
  ember shards it as it shards its own loaders. The user's batch size is the global batch, each
  rank takes the contiguous share of every global batch (``share_bounds``): the same batches, in
  the same order, as one process. Shuffling needs ``DataLoader(generator=...)`` seeded alike on
  every rank, so that every rank draws the same permutation.
- **a ``DistributedSampler``**, as the user set it up: ember calls ``set_epoch(pass)`` before
  each pass (0 for the first) and the batch size is per rank, torch's convention; rank ``r``
  reads its sampler's items (torch's order: the permutation's items ``r, r + w, r + 2w, ...``).
  The padding torch adds so that every rank has as many items (``drop_last=False``) repeats the
  permutation's first items: those duplicates are left out of the shares, so every item of the
  dataset counts once per epoch, in the gradients and the metrics alike.

Every rank computes every rank's share sizes from the plan (no collective); an empty share is
``None``, as with ember's loaders. Progress counts the global items consumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any, Self

import torch
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler, Sampler
from torch.utils.data import DataLoader as TorchLoader

from ember._device import DeviceLike
from ember.data._pass import Progress
from ember.data._shard import share_bounds
from ember.data._torch_loader import TorchDataLoader, torch_loader_like

__all__ = ["SharesIterator", "TorchShares"]


class _NoneWhenEmpty:
    """The user's collate, and None for an empty share (picklable, for worker processes)."""

    def __init__(self, collate: Callable[[list[Any]], Any]) -> None:
        self.collate = collate

    def __call__(self, items: list[Any]) -> Any:
        return self.collate(items) if items else None


class _ShareSampler(Sampler[list[int]]):
    """This rank's indices of every unit of a pass; ``shares`` holds every rank's sizes."""

    def __init__(self, loader: TorchLoader[Any], rank: int, world: int, epoch: Callable[[], int]):
        self._loader, self._rank, self._world, self._epoch = loader, rank, world, epoch
        self.shares: list[tuple[int, ...]] = []
        self.items: list[int] = []  # the global items of each unit

    def _plan(self) -> list[list[list[int]]]:
        """Every rank's indices of every unit of the pass (drawing the sampler's order)."""
        loader, world = self._loader, self._world
        sampler = loader.sampler
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self._epoch())
            size, units = loader.batch_size or 1, len(loader)
            items = len(loader.dataset)  # type: ignore[arg-type]  # map-style (TorchDataLoader)
            per_rank = []
            try:
                for rank in range(world):
                    # the pass's order as rank ``rank`` draws it (same seed and epoch everywhere)
                    sampler.rank = rank
                    indices = list(iter(sampler))
                    # the padding: positions past the dataset in torch's interleaved order, at
                    # the end of a rank's items, so what is kept is a prefix
                    kept = [i for j, i in enumerate(indices) if rank + j * world < items]
                    per_rank.append([kept[k * size : (k + 1) * size] for k in range(units)])
            finally:
                sampler.rank = self._rank
            return [list(unit) for unit in zip(*per_rank, strict=True)]
        assert loader.batch_sampler is not None
        plan = []
        for batch in loader.batch_sampler:
            bounds = [share_bounds(len(batch), rank, world) for rank in range(world)]
            plan.append([list(batch[start:end]) for start, end in bounds])
        return plan

    def __iter__(self) -> Iterator[list[int]]:
        plan = self._plan()
        self.shares = [tuple(len(part) for part in unit) for unit in plan]
        self.items = [sum(shares) for shares in self.shares]
        for unit in plan:
            yield unit[self._rank]

    def __len__(self) -> int:
        return len(self._loader)


class SharesIterator:
    """One pass: this rank's batch (or None) per unit, every rank's shares, global progress."""

    def __init__(self, batches: Iterator[Any], sampler: _ShareSampler, total: int) -> None:
        self._batches, self._sampler, self._total = batches, sampler, total
        self._unit = 0
        self._done = 0
        self.shares: tuple[int, ...] = ()

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        batch = next(self._batches)
        self.shares = self._sampler.shares[self._unit]
        self._done += self._sampler.items[self._unit]
        self._unit += 1
        return batch

    def progress(self) -> Progress:
        last = self._unit == len(self._sampler.shares)
        return Progress(self._total if last else self._done, self._total)


class TorchShares:
    """This rank's view of a user's :class:`~ember.data.TorchDataLoader` (see the module doc).

    ``len`` is the units of a pass, ``num_items`` the dataset's size; the state is the rebuilt
    loader's (its pass counters and generator), which a run with the same world size resumes.
    """

    def __init__(self, loader: TorchDataLoader[Any], rank: int, world: int) -> None:
        torch_loader: TorchLoader[Any] = loader._loader  # the user's torch DataLoader
        self._rank, self._world, self._user = rank, world, loader
        sampler = torch_loader.sampler
        shards = isinstance(sampler, DistributedSampler)
        if isinstance(sampler, DistributedSampler) and (
            sampler.num_replicas != world or sampler.rank != rank
        ):
            raise ValueError(
                f"the torch loader's DistributedSampler has num_replicas={sampler.num_replicas}, "
                f"rank={sampler.rank}, but this process is rank {rank} of {world}: make it with "
                "the defaults (they read the process group)"
            )
        if not shards and type(torch_loader.batch_sampler) is not BatchSampler:
            raise TypeError(
                "DistributedDataParallel shards a torch DataLoader made with batch_size (and a "
                "sampler, or shuffle), or one with a DistributedSampler; this one has a custom "
                f"batch_sampler ({type(torch_loader.batch_sampler).__name__})"
            )
        if isinstance(sampler, RandomSampler) and torch_loader.generator is None:
            raise ValueError(
                "a shuffling torch DataLoader under DistributedDataParallel needs "
                "generator=torch.Generator().manual_seed(seed), seeded alike on every rank: "
                "every rank must draw the same order of global batches"
            )
        self._sampler = _ShareSampler(torch_loader, rank, world, self._pass_index)
        rebuilt = torch_loader_like(
            torch_loader,
            torch_loader.dataset,
            batch_sampler=self._sampler,
            collate_fn=_NoneWhenEmpty(torch_loader.collate_fn),
            generator=torch_loader.generator,
        )
        self._loader: TorchDataLoader[Any] = TorchDataLoader(rebuilt, device=loader.device)
        self._loader.load_state_dict({**loader.state_dict(), **_identity(self._loader)})

    def _pass_index(self) -> int:
        return int(self._loader.state_dict()["epoch"]) - 1  # the pass just begun, from 0

    def __iter__(self) -> SharesIterator:
        batches = iter(self._loader)
        return SharesIterator(batches, self._sampler, self._loader.num_items())

    def __len__(self) -> int:
        return len(self._loader)

    def num_items(self) -> int:
        return self._loader.num_items()

    @property
    def device(self) -> torch.device:
        return self._loader.device

    def to_device(self, device: DeviceLike) -> TorchShares:
        """The same rank's view of the user's loader moved to ``device``, at this position."""
        moved = TorchShares(self._user.to_device(device), self._rank, self._world)
        moved.load_state_dict(self.state_dict())
        return moved

    def slice(self, start: int, end: int) -> TorchShares:
        """The same rank's view of the user's loader's ``slice(start, end)``."""
        return TorchShares(self._user.slice(start, end), self._rank, self._world)

    def state_dict(self) -> dict[str, Any]:
        """The rebuilt loader's state (pass counters, generator)."""
        return self._loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a state of this view (the same world size)."""
        self._loader.load_state_dict(state)

    def close(self) -> None:
        """Stop the rebuilt loader's worker processes; idempotent."""
        self._loader.close()


def _identity(loader: TorchDataLoader[Any]) -> dict[str, Any]:
    state = loader.state_dict()
    return {key: state[key] for key in ("batch_size", "num_batches")}
