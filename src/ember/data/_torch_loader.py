"""``TorchDataLoader``: a ``torch.utils.data.DataLoader`` presented as an ember ``DataLoader``.

ember's own loaders build batches on threads, which scales only when the batcher releases the
GIL. When it holds the GIL (pure-Python decoding, PIL transforms), torch's worker *processes* do
better; this adapter lets such a loader feed ember's training loop: progress, ``num_items``,
``to_device``, ``slice`` and state.

What its state restores: ``epoch`` and ``batches_consumed`` always. The batch order is restored
too when the torch loader has a ``generator`` (``DataLoader(..., generator=g)``): the state holds
that generator's state, taken before the unfinished pass (so the pass is replayed) or after the
last finished one (so the next epoch follows). Without a generator torch shuffles with its global
RNG, which the state does not hold: only the counters come back. An unfinished pass is resumed by
replaying it and discarding the batches already consumed, which costs the time to build them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar, cast

import torch
from torch.utils.data import (
    BatchSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
)
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset as TorchDataset
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter

from ember._checks import check_slice
from ember._device import DeviceLike, as_device, move_to_device
from ember._errors import DataLoaderError
from ember._protocols import check_protocol
from ember.data._dataset import Dataset
from ember.data._loader import DataLoader, DataLoaderIterator
from ember.data._pass import PassIterator, PassTracker, check_state

__all__ = ["TORCH_STATE_KIND", "TorchDataLoader", "as_ember_loader", "torch_loader_like"]

BatchT = TypeVar("BatchT")

TORCH_STATE_KIND = "ember.data._torch_loader"
"""The ``kind`` tag of a ``TorchDataLoader`` state."""

_STATE_VERSION = 1
_IDENTITY = ("kind", "version", "num_items", "batch_size", "num_batches")


def _encode(state: torch.Tensor) -> str:
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def _decode(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


class TorchDataLoader(PassTracker, Generic[BatchT]):
    """``loader``'s batches, with ember's progress, position and state.

    ``num_items()`` is ``len(loader.dataset)`` (a map-style dataset is required) and ``len()`` is
    ``len(loader)``. Batches come from torch's collate; with a non-CPU ``device`` every tensor in
    them is moved there (``move_to_device``). ``to_device`` shares the torch loader (and its
    worker processes and generator): the moved loader continues the same sequence of epochs, so
    iterate only one of the two. ``slice`` rebuilds the torch loader over a ``Subset``, which is
    possible when it was made from ``batch_size``/``shuffle`` (its default samplers). Progress
    counts ``batch_size`` items a batch (the last batch completes the pass); with a custom
    ``batch_sampler`` it is proportional to the batches consumed.

    State::

        {"kind": "ember.data._torch_loader", "version": 1, "num_items": int,
         "batch_size": int | None, "num_batches": int, "epoch": int, "batches_consumed": int,
         "generator_state": str | None}   # base64 of torch.Generator.get_state()
    """

    def __init__(self, loader: TorchLoader[Any], *, device: DeviceLike = "cpu") -> None:
        super().__init__()
        if not isinstance(loader, TorchLoader):
            raise TypeError(
                f"loader must be a torch.utils.data.DataLoader, got {type(loader).__name__}"
            )
        dataset = loader.dataset
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            raise TypeError(
                "TorchDataLoader needs a map-style dataset with __len__, got "
                f"{type(dataset).__name__}"
            )
        num_items = len(dataset)
        if num_items == 0:
            raise ValueError("the torch loader's dataset is empty (len 0)")
        self._loader = loader
        self._num_items = num_items
        # the batches of the pass under way, read when it starts: torch's len() walks its
        # sampler in Python, and the progress of every batch needs it
        self._pass_batches = len(loader)
        self._device = as_device(device)
        self._generator: torch.Generator | None = loader.generator
        self._pass_start: torch.Tensor | None = None  # generator state before the current pass
        self._live: Iterator[Any] | None = None  # torch's iterator of the current pass

    def __iter__(self) -> DataLoaderIterator[BatchT]:
        resuming = self._resume
        token = self._begin_pass()
        self._pass_batches = len(self._loader)
        if self._generator is not None:
            if resuming and self._pass_start is not None:
                self._generator.set_state(self._pass_start)
            else:
                self._pass_start = self._generator.get_state()
        batches: Iterator[Any] = iter(self._loader)
        self._live = batches
        for _ in range(self._consumed):  # replay a resumed pass up to where it stopped
            next(batches)
        if self._device.type != "cpu":
            batches = (move_to_device(batch, self._device) for batch in batches)
        return PassIterator(self, token, batches)

    def __len__(self) -> int:
        return len(self._loader)

    def num_items(self) -> int:
        return self._num_items

    def _items_after(self, batches: int) -> int:
        per_pass = self._pass_batches
        if batches >= per_pass:
            return self._num_items
        if self._loader.batch_size is None:
            return batches * self._num_items // per_pass
        return min(batches * self._loader.batch_size, self._num_items)

    @property
    def device(self) -> torch.device:
        return self._device

    def to_device(self, device: DeviceLike) -> TorchDataLoader[BatchT]:
        """A loader putting the same torch loader's batches on ``device``, at this position."""
        moved: TorchDataLoader[BatchT] = TorchDataLoader(self._loader, device=device)
        moved.load_state_dict(self.state_dict())
        return moved

    def slice(self, start: int, end: int) -> TorchDataLoader[BatchT]:
        """A loader over a new torch loader with the same settings on ``Subset(dataset,
        range(start, end))``; its generator (if any) is seeded from this one's initial seed and
        ``(start, end)``. DataLoaderError when the torch loader has a custom sampler."""
        start, end = check_slice(start, end, self._num_items)
        loader = self._loader
        sampler = loader.sampler
        if (
            type(loader.batch_sampler) is not BatchSampler
            or type(sampler) not in (SequentialSampler, RandomSampler)
            or getattr(sampler, "generator", None) is not loader.generator
        ):
            raise DataLoaderError(
                "TorchDataLoader.slice can only rebuild a torch DataLoader made with batch_size "
                "and shuffle (its default samplers); this one has a custom sampler or "
                "batch_sampler. Wrap a DataLoader over torch.utils.data.Subset(dataset, "
                "range(start, end)) in a TorchDataLoader instead."
            )
        generator = None
        if loader.generator is not None:
            import numpy as np  # lazy: keeps `import ember` fast ("light import")

            seed = np.random.SeedSequence(
                loader.generator.initial_seed(), spawn_key=(start, end)
            ).generate_state(1, np.uint64)[0]
            generator = torch.Generator(loader.generator.device).manual_seed(int(seed))
        sliced = torch_loader_like(
            loader,
            Subset(loader.dataset, range(start, end)),
            batch_size=loader.batch_size,
            shuffle=isinstance(sampler, RandomSampler),
            collate_fn=loader.collate_fn,
            drop_last=loader.drop_last,
            generator=generator,
        )
        return TorchDataLoader(sliced, device=self._device)

    def state_dict(self) -> dict[str, Any]:
        """Counters and, with a generator, its state (see the module docstring)."""
        generator_state = None
        if self._generator is not None:
            before_pass = self._pass_start if self._unfinished() else None
            generator_state = _encode(
                self._generator.get_state() if before_pass is None else before_pass
            )
        return {
            "kind": TORCH_STATE_KIND,
            "version": _STATE_VERSION,
            "num_items": self._num_items,
            "batch_size": self._loader.batch_size,
            "num_batches": len(self),
            **self._position(),
            "generator_state": generator_state,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``; ValueError naming the field if it does not fit this loader."""
        check_state(state, self.state_dict(), _IDENTITY)
        saved = state["generator_state"]
        if (saved is None) != (self._generator is None):
            raise ValueError(
                "cannot load loader state: generator_state is "
                f"{'absent' if saved is None else 'present'} in the state but this torch loader "
                f"{'has no' if self._generator is None else 'has a'} generator"
            )
        self._load_position(state)
        if self._generator is not None:
            generator_state = _decode(saved)
            if self._resume:
                self._pass_start = generator_state
            else:
                self._generator.set_state(generator_state)

    def close(self) -> None:
        """Stop the torch loader's worker processes (persistent ones too); idempotent."""
        super().close()
        live, self._live = self._live, None
        if isinstance(live, _MultiProcessingDataLoaderIter):
            # torch has no public way to stop persistent workers; this is what its __del__ does.
            live._shutdown_workers()
            if self._loader._iterator is live:
                self._loader._iterator = None  # a later iter() must not reuse the dead workers


def as_ember_loader(loader: Any, what: str) -> DataLoader[Any]:
    """``loader`` as an ember loader: a ``torch.utils.data.DataLoader`` (the loader a PyTorch
    user already has) in a :class:`TorchDataLoader`, anything else checked against the
    ``DataLoader`` protocol. A TypeError names ``what``: for a dataset or a list given instead
    of a loader, with the line that makes one; else with the members it lacks."""
    if isinstance(loader, TorchLoader):
        return TorchDataLoader(loader)
    try:
        check_protocol(loader, DataLoader, what)
    except TypeError:
        fix = _loader_for(loader)
        if fix is None:
            raise
        raise TypeError(f"{what} is a {type(loader).__name__}, not a loader: {fix}") from None
    return cast(DataLoader[Any], loader)


def _loader_for(value: Any) -> str | None:
    """The line that makes a loader of ``value`` (a list of items or batches, a dataset), or
    None for anything else."""
    if isinstance(value, list | tuple):
        return (
            f"its {len(value)} values have no batch size, position or device of a loader. "
            "Items: DataLoaderBuilder().batch_size(32).build(InMemDataset(items)); batches "
            "made already, each as it is: torch.utils.data.DataLoader(batches, batch_size=None)"
        )
    if isinstance(value, TorchDataset | Dataset):  # a torch or an ember (map-style) dataset
        return (
            "batch it with DataLoaderBuilder().batch_size(32).build(dataset) (from ember.data), "
            "or torch.utils.data.DataLoader(dataset, batch_size=32)"
        )
    return None


def torch_loader_like(loader: TorchLoader[Any], dataset: Any, **batching: Any) -> TorchLoader[Any]:
    """A torch ``DataLoader`` over ``dataset`` with ``loader``'s worker settings (workers,
    pinning, timeout, init function, context, prefetch, persistence, order) and the sampling
    and collation of ``batching`` (``DataLoader``'s own keywords): one slice, or one rank's
    share, of the user's loader, read as the user set it up."""
    options: dict[str, Any] = {}
    if hasattr(loader, "in_order"):  # torch >= 2.6
        options["in_order"] = loader.in_order
    return TorchLoader(
        dataset,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        prefetch_factor=loader.prefetch_factor,
        persistent_workers=loader.persistent_workers,
        **options,
        **batching,
    )
