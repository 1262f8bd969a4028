"""Seeded random streams: every random draw of the data layer is a pure function of a seed, a
stream path and a counter.

A loader never keeps a mutable random generator. Pass ``k`` of a loader with seed ``s`` and
stream ``p`` over ``n`` items is shuffled by :func:`epoch_order` ``(s, p, k, n)``, so

* every pass gets a different order and a whole run is reproducible from the seed;
* ``to_device`` and a restored checkpoint only need to copy ``(seed, stream, epoch)`` and the
  position to continue exactly where the original would ("stable stream", "exact resume");
* a pass of any length starts in about a millisecond and resumes at any position in O(1);
* ``slice`` derives a child stream ``(*p, SLICE, start, end)``, independent of its parent and of
  its siblings, without advancing anything (Burn's fork advances the parent);
* the global torch/numpy/python random states are never read or touched.

Other draws (``ShuffledDataset``, ``SamplerDataset``, a stream's shuffle buffer) use
:func:`generator`, numpy's ``PCG64`` from ``SeedSequence(seed, spawn_key=stream)``. The
top-level streams below keep loaders and dataset wrappers that share a seed independent.

**The shuffled order** (``docs/data.md``, "Determinism"). A pass of at most
:data:`FULL_PERMUTATION_ITEMS` items is numpy's permutation of them drawn at its start,
``Generator(PCG64(SeedSequence(s, spawn_key=(*p, k)))).permutation(n)`` (as ember always did;
under 5 ms, and cheaper per item than the lazy order). A longer pass is a :class:`FeistelOrder`:
position ``i`` reads item ``order(i)``, a bijection of ``range(n)`` evaluated for the positions
asked for only, so nothing before (or after) them is computed. ``order`` is a six-round Feistel
network over ``Z_a x Z_b``
(``a = ceil(sqrt(n))``, ``b = ceil(n / a)``, so ``a * b`` is at most about ``sqrt(n)`` above
``n``) with modular addition, walked again while its value is ``n`` or more (cycle walking: the
result is a bijection of ``range(n)``, and a walk is needed for under ``1/sqrt(n)`` of the
positions). Each round adds ``fmix64(right XOR key_r) mod width`` to the left part; the six
64-bit round keys are ``SeedSequence(seed, spawn_key=(*stream, k)).generate_state(6)``. It is a
keyed pseudo-random permutation (the construction of TensorFlow's and Grain's ``index_shuffle``),
not a uniform draw among all ``n!`` orders; measured positions are uniform (chi-square over
20,000 seeds) and uncorrelated with the items and across passes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "FULL_PERMUTATION_ITEMS",
    "LOADER_STREAM",
    "SAMPLER_DATASET_STREAM",
    "SHUFFLED_DATASET_STREAM",
    "FeistelOrder",
    "Order",
    "PermutationOrder",
    "Stream",
    "epoch_order",
    "generator",
    "slice_stream",
]

Stream = tuple[int, ...]
"""A path of non-negative ints naming one independent random stream."""

LOADER_STREAM: Stream = (0,)
SHUFFLED_DATASET_STREAM: Stream = (1,)
SAMPLER_DATASET_STREAM: Stream = (2,)

FULL_PERMUTATION_ITEMS = 1 << 16
"""The longest pass shuffled by a full permutation drawn at its start; longer ones are lazy."""

_SLICE = 1  # marks a child stream made by slice(); epoch counters are appended after it
_ROUNDS = 6  # four make a pseudo-random permutation; six leave no measurable bias on small n
_FMIX1, _FMIX2, _FMIX_SHIFT = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 33  # MurmurHash3's fmix64


def generator(seed: int | None, stream: Stream) -> np.random.Generator:
    """A private generator for ``(seed, stream)``; ``seed=None`` draws fresh OS entropy."""
    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=stream)))


class Order(Protocol):
    """A pass's order: which item each position reads."""

    def __len__(self) -> int:
        """The number of items."""
        ...

    def take(self, low: int, high: int) -> np.ndarray:
        """The items at positions ``low .. high - 1``."""
        ...


def epoch_order(seed: int, stream: Stream, epoch: int, n: int) -> Order:
    """The order of pass ``epoch`` of ``(seed, stream)`` over ``range(n)`` (see the module doc)."""
    if n <= FULL_PERMUTATION_ITEMS:
        return PermutationOrder(generator(seed, (*stream, epoch)).permutation(n))
    return FeistelOrder(seed, stream, epoch, n)


class PermutationOrder:
    """An order held whole: a permutation array."""

    __slots__ = ("_items",)

    def __init__(self, items: np.ndarray) -> None:
        self._items = items

    def __len__(self) -> int:
        return len(self._items)

    def take(self, low: int, high: int) -> np.ndarray:
        """The items at positions ``low .. high - 1`` (a view of the array)."""
        return self._items[low:high]


class FeistelOrder:
    """The lazy order of pass ``epoch`` of ``(seed, stream)`` over ``range(n)``: :meth:`take`
    gives the items at any positions, computed for those positions only (see the module doc)."""

    __slots__ = ("_keys", "_n", "_widths")

    def __init__(self, seed: int, stream: Stream, epoch: int, n: int) -> None:
        import numpy as np  # lazy: keeps `import ember` fast ("light import")

        if n < 1:
            raise ValueError(f"a shuffled order needs at least one item, got n={n}")
        self._n = n
        a = math.isqrt(n - 1) + 1  # ceil(sqrt(n))
        b = -(-n // a)
        state = np.random.SeedSequence(seed, spawn_key=(*stream, epoch)).generate_state(
            _ROUNDS, np.uint64
        )
        self._keys = [np.uint64(key) for key in state]
        # round r splits x into (left, right) in Z_p x Z_q and gives (right, left + f) in Z_q x Z_p
        self._widths = [
            (np.uint64(a), np.uint64(b)) if r % 2 == 0 else (np.uint64(b), np.uint64(a))
            for r in range(_ROUNDS)
        ]

    def __len__(self) -> int:
        return self._n

    def take(self, low: int, high: int) -> np.ndarray:
        """The items at positions ``low .. high - 1`` (a uint64 array)."""
        import numpy as np

        if not 0 <= low <= high <= self._n:
            raise IndexError(f"positions {low}..{high} out of range for an order of {self._n}")
        items = self._rounds(np.arange(low, high, dtype=np.uint64))
        walking = np.flatnonzero(items >= self._n)
        while walking.size:  # cycle walking: the network's domain a * b is a little above n
            items[walking] = self._rounds(items[walking])
            walking = walking[items[walking] >= self._n]
        return items

    def _rounds(self, x: np.ndarray) -> np.ndarray:
        import numpy as np

        shift, m1, m2 = np.uint64(_FMIX_SHIFT), np.uint64(_FMIX1), np.uint64(_FMIX2)
        for key, (p, q) in zip(self._keys, self._widths, strict=True):
            left, right = np.divmod(x, q)
            z = right ^ key
            z ^= z >> shift
            z *= m1  # uint64 arithmetic wraps around, as the hash wants
            z ^= z >> shift
            z *= m2
            z ^= z >> shift
            x = right * p + (left + z % p) % p
        return x


def slice_stream(stream: Stream, start: int, end: int) -> Stream:
    """The stream of the slice ``[start, end)`` of a loader on ``stream``."""
    return (*stream, _SLICE, start, end)
