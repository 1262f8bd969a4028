"""Batchers: what turns a list of items into a batch on a device.

A batcher is anything with ``batch(items, device)`` (the ``Batcher`` protocol), a plain
function ``(items, device) -> batch``, or a collate function of the items alone
(``torch.utils.data.default_collate``, a ``collate_fn`` written for torch's DataLoader), whose
batch is then moved to the loader's device; loaders accept all three and normalise them with
:func:`batch_function`. :class:`BatchBuilder` is the single place where a batch is made from
dataset indexes, shared by the single-thread loader and the worker threads, so both build
exactly the same batches. ``default_collate`` (``_collate.py``) is the batcher of a
``DataLoaderBuilder`` given none: torch's collation, with dataclasses, on the loader's device.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

import torch

from ember._device import move_to_device
from ember.data._collate import gather_path
from ember.data._dataset import Dataset, fetcher

__all__ = ["BatchBuilder", "BatchFn", "Batcher", "CollateFn", "as_batcher", "batch_function"]

ItemT = TypeVar("ItemT")
BatchT = TypeVar("BatchT")
BatchT_co = TypeVar("BatchT_co", covariant=True)

BatchFn = Callable[[list[ItemT], torch.device], BatchT]
"""A plain function used as a batcher."""
CollateFn = Callable[[list[ItemT]], BatchT]
"""A collate function of the items alone, used as a batcher (its batch moved to the device)."""


@runtime_checkable
class Batcher(Protocol[ItemT, BatchT_co]):
    """Builds one batch from a list of items, with its tensors on ``device``.

    Loaders may call it from worker threads, so it should not mutate shared state.
    """

    def batch(self, items: list[ItemT], device: torch.device, /) -> BatchT_co:
        """The batch of ``items`` on ``device``."""
        ...


def batch_function(
    batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT] | CollateFn[ItemT, BatchT],
) -> BatchFn[ItemT, BatchT]:
    """The function to call for ``batcher`` (see :func:`as_batcher`): its ``batch`` method, or
    the function of ``(items, device)``."""
    checked = as_batcher(batcher)
    return checked.batch if isinstance(checked, Batcher) else checked


def as_batcher(
    batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT] | CollateFn[ItemT, BatchT],
) -> Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT]:
    """``batcher`` as loaders take it: a ``Batcher`` or a function of ``(items, device)`` as
    it is; a collate function of the items alone (torch's ``default_collate``) wrapped to move
    its batch to the device. TypeError when ``batcher`` is none of these."""
    if isinstance(batcher, Batcher):
        return batcher
    if not callable(batcher):
        raise TypeError(
            "batcher must have a batch(items, device) method or be a function (items, device) "
            f"-> batch (or a collate function items -> batch), got {batcher!r}"
        )
    if _collates(batcher):
        return _on_device(cast(CollateFn[ItemT, BatchT], batcher))
    return cast(BatchFn[ItemT, BatchT], batcher)


def _collates(function: Callable[..., Any]) -> bool:
    """Whether ``function`` takes the items alone, not ``(items, device)``: a collate function
    such as torch's ``default_collate``. A function whose signature cannot be read is taken as
    a batcher of ``(items, device)``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False
    return _binds(signature, 1) and not _binds(signature, 2)


def _binds(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def _on_device(collate: CollateFn[ItemT, BatchT]) -> BatchFn[ItemT, BatchT]:
    """A batcher of ``(items, device)`` from a collate function of the items."""

    def batch(items: list[ItemT], device: torch.device) -> BatchT:
        return move_to_device(collate(items), device)

    return batch


def _items(items: list[Any]) -> list[Any]:
    return items


def _gathered(batch: Any, device: torch.device) -> Any:
    return batch  # built on its device by the gather


class BatchBuilder(Generic[ItemT, BatchT]):
    """Makes the batch for a chunk: fetch the items at its dataset indexes (or take the items a
    stream read), call the batcher, check.

    It holds no reference to a loader, so worker threads can run it without keeping the loader
    alive.
    """

    __slots__ = ("_batch", "_batcher", "_device", "_fetch")

    def __init__(
        self,
        dataset: Dataset[ItemT] | None,
        batcher: Batcher[ItemT, BatchT] | BatchFn[ItemT, BatchT],
        device: torch.device,
    ) -> None:
        """``dataset`` is where chunks' indexes point; None when chunks are the items."""
        self._fetch: Callable[[list[Any]], Any] = _items if dataset is None else fetcher(dataset)
        self._batch: BatchFn[Any, BatchT] = batch_function(batcher)
        gather = gather_path(dataset, batcher, device)
        if gather is not None:  # the same batch, gathered with one index op per tensor
            self._fetch, self._batch = gather, _gathered
        self._batcher: Any = batcher
        self._device = device

    def __call__(self, chunk: list[Any]) -> BatchT:
        batch = self._batch(self._fetch(chunk), self._device)
        if batch is None:
            raise TypeError(
                f"the batcher {self._batcher!r} returned None for a batch of {len(chunk)} "
                "items; it must return the batch (a loader can only check this once it builds "
                "a batch, not when it is constructed)"
            )
        return batch
