"""A pass's plan: the chunk of each batch to build, computed on demand.

A loader's pass is a sequence of :class:`Chunk` s, one per batch: the dataset indexes of a
map-style loader's batch, or the items a streaming loader read for it. The worker threads, the
data-parallel views and the loaders themselves all consume the same chunks, so they build the
same batches.

:class:`EpochPlan` is a map-style pass: its order (``_rng.epoch_order``: a permutation drawn
whole for a pass of up to 65,536 items, a lazy bijection beyond; or none for the items in
order) is read a block of positions at a time (about :data:`BLOCK_ITEMS` items: whole
batches), when the first batch of the block is planned. Starting a pass of ten million items,
or resuming one at its five-millionth item, costs one block and nothing per batch before the
position.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, overload

if TYPE_CHECKING:
    from ember.data._rng import Order

__all__ = ["BLOCK_ITEMS", "Chunk", "EpochPlan"]

BLOCK_ITEMS = 4096
"""Positions of a shuffled order evaluated together: one numpy call per block costs about what
one per batch would (a lazy order's rounds are a few dozen array operations), so a block of
batches makes the order cost a few microseconds a batch, and the first batch about a
millisecond."""


class Chunk(NamedTuple):
    """What one batch of a pass is built from, and where it stands in the pass."""

    payload: list[Any]
    """The dataset indexes of the batch (map-style) or its items (streaming)."""
    start: int
    """The items of the pass before this batch."""
    last: bool
    """Whether this is the pass's last batch."""
    resume: Any = None
    """A streaming source's own state once this batch's items were read (None otherwise)."""


class EpochPlan(Sequence[list[int]]):
    """The dataset indexes of every batch of one map-style pass, taken from its order on demand.

    Batch ``j`` is ``order.take(j * batch_size, (j + 1) * batch_size) + offset`` (``range``
    without an order); every batch is full except a shorter last one. The order is evaluated a
    block of whole batches at a time, and the latest block is kept (one list; a thread that
    plans another block replaces it, never changes it).
    """

    __slots__ = ("_batch_size", "_block", "_block_batches", "_count", "_items", "_offset", "_order")

    def __init__(self, order: Order | None, offset: int, items: int, batch_size: int) -> None:
        self._order = order
        self._offset = offset
        self._items = items
        self._batch_size = batch_size
        self._count = -(-items // batch_size)
        self._block_batches = max(1, BLOCK_ITEMS // batch_size)
        self._block: tuple[int, list[int]] = (-1, [])  # (block number, its dataset indexes)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, index: int) -> list[int]: ...

    @overload
    def __getitem__(self, index: slice) -> list[list[int]]: ...

    def __getitem__(self, index: int | slice) -> list[int] | list[list[int]]:
        if isinstance(index, slice):
            return [self._batch(j) for j in range(*index.indices(self._count))]
        if not -self._count <= index < self._count:
            raise IndexError(f"batch {index} out of range for a plan of {self._count} batches")
        return self._batch(index % self._count)

    def _batch(self, j: int) -> list[int]:
        low = j * self._batch_size
        high = min(low + self._batch_size, self._items)
        if self._order is None:
            return list(range(self._offset + low, self._offset + high))
        number, indexes = self._block
        block = j // self._block_batches
        if number != block:
            first = block * self._block_batches * self._batch_size
            last = min(first + self._block_batches * self._batch_size, self._items)
            indexes = self._order.take(first, last).tolist()
            if self._offset:
                indexes = [index + self._offset for index in indexes]
            self._block = (block, indexes)
        start = low - block * self._block_batches * self._batch_size
        return indexes[start : start + high - low]

    def chunks(self, first: int) -> Iterator[Chunk]:
        """The chunks of batches ``first, first + 1, ...``, each planned when it is pulled."""
        last = self._count - 1
        for j in range(first, self._count):
            yield Chunk(self._batch(j), j * self._batch_size, j == last)
