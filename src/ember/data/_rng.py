"""Seeded random streams: every random draw of the data layer is a pure function of a seed, a
stream path and a counter.

A loader never keeps a mutable random generator. Epoch ``k`` of a loader with seed ``s`` and
stream ``p`` is shuffled by ``Generator(PCG64(SeedSequence(entropy=s, spawn_key=(*p, k))))``, so

* every epoch gets a different permutation and a whole run is reproducible from the seed;
* ``to_device`` and a restored checkpoint only need to copy ``(seed, stream, epoch)`` to
  continue exactly where the original would ("stable stream", "exact resume");
* ``slice`` derives a child stream ``(*p, SLICE, start, end)``, independent of its parent and of
  its siblings, without advancing anything (Burn's fork advances the parent);
* the global torch/numpy/python random states are never read or touched.

The top-level streams below keep loaders and dataset wrappers that share a seed independent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "LOADER_STREAM",
    "SAMPLER_DATASET_STREAM",
    "SHUFFLED_DATASET_STREAM",
    "Stream",
    "epoch_permutation",
    "generator",
    "slice_stream",
]

Stream = tuple[int, ...]
"""A path of non-negative ints naming one independent random stream."""

LOADER_STREAM: Stream = (0,)
SHUFFLED_DATASET_STREAM: Stream = (1,)
SAMPLER_DATASET_STREAM: Stream = (2,)

_SLICE = 1  # marks a child stream made by slice(); epoch counters are appended after it


def generator(seed: int | None, stream: Stream) -> np.random.Generator:
    """A private generator for ``(seed, stream)``; ``seed=None`` draws fresh OS entropy."""
    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=stream)))


def epoch_permutation(seed: int, stream: Stream, epoch: int, n: int) -> np.ndarray:
    """The permutation of ``range(n)`` that shuffles epoch ``epoch`` of ``(seed, stream)``."""
    return generator(seed, (*stream, epoch)).permutation(n)


def slice_stream(stream: Stream, start: int, end: int) -> Stream:
    """The stream of the slice ``[start, end)`` of a loader on ``stream``."""
    return (*stream, _SLICE, start, end)
