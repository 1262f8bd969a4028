"""Mid-epoch resume time against position, for a 10,000,000-item shuffled dataset (not a test).

A loader's state is its seed, epoch and position, and a pass's order is a seeded bijection
evaluated a block of positions at a time (``ember/data/_rng.py``); so starting a pass costs one
block, and resuming at item 5,000,000 costs the same: a flat line, in milliseconds. Printed, each
the median of alternated pairs, all in this run:

1. the first batch of a fresh shuffled epoch: ember against ``torch.utils.data.DataLoader``
   (``shuffle=True`` with a generator, the same batch size, a collate that returns the list) and
   against the numpy permutation of all 10,000,000 items ember drew up front before (the
   release before the lazy order);
2. ``iter()`` and the first batch after ``load_state_dict`` at positions 0 .. 9,999,900, for
   ``BatchDataLoader`` and ``MultiThreadDataLoader`` (2 workers), as a ratio to torch's fresh
   first batch measured alongside;
3. for contrast, resuming by skipping batches (what a loader without a position must do):
   torch's loader advanced by ``k`` batches, at a few positions (it grows with the position).

    python benchmarks/resume.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ember.data import BatchDataLoader, MultiThreadDataLoader

ITEMS = 10_000_000
BATCH_SIZE = 100
SEED = 7


def list_batcher(items: list[int], device: torch.device) -> list[int]:
    return items


def collate(items: list[int]) -> list[int]:
    return items


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired(a: Callable[[], Any], b: Callable[[], Any], repeats: int) -> tuple[float, float]:
    """Medians of ``a`` and ``b`` timed in alternated pairs (drift hits both alike)."""
    times_a, times_b = [], []
    for _ in range(repeats):
        times_a.append(_seconds(a))
        times_b.append(_seconds(b))
    return statistics.median(times_a), statistics.median(times_b)


def torch_first_batch() -> None:
    generator = torch.Generator().manual_seed(SEED)
    loader = torch.utils.data.DataLoader(
        range(ITEMS), batch_size=BATCH_SIZE, shuffle=True, generator=generator, collate_fn=collate
    )
    next(iter(loader))


def torch_skip(batches: int) -> Callable[[], None]:
    def run() -> None:
        generator = torch.Generator().manual_seed(SEED)
        loader = torch.utils.data.DataLoader(
            range(ITEMS),
            batch_size=BATCH_SIZE,
            shuffle=True,
            generator=generator,
            collate_fn=collate,
        )
        iterator = iter(loader)
        for _ in range(batches + 1):
            next(iterator)

    return run


def permutation_first_batch() -> None:
    """ember's first batch before the lazy order: numpy's permutation of every item first."""
    generator = np.random.Generator(np.random.PCG64(np.random.SeedSequence(SEED, spawn_key=(0, 1))))
    order = generator.permutation(ITEMS)
    list_batcher(order[:BATCH_SIZE].tolist(), torch.device("cpu"))


def ember_first_batch() -> None:
    next(iter(BatchDataLoader(range(ITEMS), list_batcher, batch_size=BATCH_SIZE, seed=SEED)))


def ember_resume(batches: int, workers: int) -> Callable[[], None]:
    def run() -> None:
        loader: BatchDataLoader[int, list[int]]
        if workers:
            loader = MultiThreadDataLoader(
                range(ITEMS), list_batcher, num_workers=workers, batch_size=BATCH_SIZE, seed=SEED
            )
        else:
            loader = BatchDataLoader(range(ITEMS), list_batcher, batch_size=BATCH_SIZE, seed=SEED)
        state = {**loader.state_dict(), "epoch": 1, "batches_consumed": batches}
        loader.load_state_dict(state)
        next(iter(loader))
        loader.close()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    print(f"{ITEMS:,} items, batch {BATCH_SIZE}, shuffled; medians of {repeats} alternated pairs")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    print("\n1. first batch of a fresh epoch")
    ember, raw = paired(ember_first_batch, torch_first_batch, repeats)
    eager, raw_again = paired(permutation_first_batch, torch_first_batch, repeats)
    print(f"   torch DataLoader               {raw * 1e3:8.1f} ms")
    lazy = f"{ember * 1e3:8.1f} ms   ratio to torch {ember / raw:6.3f}"
    print(f"   ember (lazy order)             {lazy}")
    print(
        f"   ember before (full permutation){eager * 1e3:8.1f} ms   ratio to torch "
        f"{eager / raw_again:6.3f}"
    )

    print("\n2. resume: load_state_dict at item p, then iter() and the first batch")
    print("   position p      workers  resume ms  torch fresh ms  ratio")
    for items in (0, 1_000_000, 2_500_000, 5_000_000, 7_500_000, ITEMS - BATCH_SIZE):
        for workers in (0, 2):
            resume, raw = paired(
                ember_resume(items // BATCH_SIZE, workers), torch_first_batch, repeats
            )
            print(
                f"   {items:>10,}      {workers:>7}  {resume * 1e3:9.2f}  {raw * 1e3:14.1f}  "
                f"{resume / raw:6.3f}"
            )

    print("\n3. for contrast: torch's loader resumed by skipping the batches before p")
    print("   position p      skip ms  torch fresh ms  ratio")
    for items in (100_000, 1_000_000) if args.quick else (100_000, 1_000_000, 2_000_000):
        skip, raw = paired(torch_skip(items // BATCH_SIZE), torch_first_batch, repeats)
        print(f"   {items:>10,}  {skip * 1e3:9.1f}  {raw * 1e3:14.1f}  {skip / raw:5.2f}")

    print(f"\nload average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
