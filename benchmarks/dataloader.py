"""Data loader throughput, measured side by side in one run (DESIGN §10; not a test).

1. ``BatchDataLoader`` against ``torch.utils.data.DataLoader(num_workers=0)`` on the same rows
   (a 4-float tensor and a float each), batch 32, the same stacking batcher as ``collate_fn``,
   shuffled; target >= 3x items/s. Then the same with a batcher that returns its list, which
   isolates what the loaders themselves cost per batch.
2. ``MultiThreadDataLoader`` with 2 workers against 1 worker, on a batcher that releases the GIL
   (a torch matmul sized to take about 1 ms with one intra-op thread); target >= 1.6x.

Prints the median of several repeats and the ratios. ``--quick`` for a short run.

    python benchmarks/dataloader.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ember.data import BatchDataLoader, InMemDataset, MultiThreadDataLoader

Row = tuple[torch.Tensor, float]
Batch = tuple[torch.Tensor, torch.Tensor]


def make_rows(n: int) -> list[Row]:
    generator = torch.Generator().manual_seed(0)
    xs = torch.randn(n, 4, generator=generator)
    ys = torch.randn(n, generator=generator).tolist()
    return list(zip(xs.unbind(), ys, strict=True))


def stack_batcher(items: list[Row], device: torch.device) -> Batch:
    xs = torch.stack([x for x, _ in items]).to(device)
    ys = torch.tensor([y for _, y in items], device=device)
    return xs, ys


def list_batcher(items: list[Row], device: torch.device) -> list[Row]:
    return items


class MatmulBatcher:
    """Stacks the rows, then runs a matmul sized to take about ``target_s`` (releases the GIL)."""

    def __init__(self, target_s: float) -> None:
        size = 64
        while True:
            self.weight = torch.randn(size, size)
            if self._time_matmul() >= target_s or size >= 4096:
                break
            size = int(size * 1.25)
        self.size = size

    def _time_matmul(self) -> float:
        return min(_time(lambda: self.weight @ self.weight) for _ in range(5))

    def batch(self, items: list[Row], device: torch.device) -> Batch:
        xs, ys = stack_batcher(items, device)
        return xs, ys + (self.weight @ self.weight)[0, 0]


def _time(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _consume(loader: Iterable[Any]) -> None:
    for _ in loader:
        pass


def items_per_second(loader: Iterable[Any], n: int, repeats: int) -> float:
    """The median of ``repeats`` full passes, after one warm-up pass."""
    _consume(loader)
    return statistics.median(n / _time(lambda: _consume(loader)) for _ in range(repeats))


def _us_per_batch(items_per_s: float) -> float:
    return 32 / items_per_s * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer items and repeats")
    args = parser.parse_args()
    n, repeats = (5_000, 3) if args.quick else (20_000, 7)
    torch.set_num_threads(1)
    rows = make_rows(n)
    cpu = torch.device("cpu")

    print(f"1. in-memory rows: {n} items, batch 32, shuffled, median of {repeats} passes")
    ember = BatchDataLoader(InMemDataset(rows), stack_batcher, batch_size=32, seed=0)
    reference = torch.utils.data.DataLoader(
        rows,  # a plain list: torch's fastest dataset
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=lambda items: stack_batcher(items, cpu),
    )
    ember_rate = items_per_second(ember, n, repeats)
    torch_rate = items_per_second(reference, n, repeats)
    print(
        f"   torch.utils.data.DataLoader(num_workers=0): {torch_rate:12,.0f} items/s "
        f"({_us_per_batch(torch_rate):5.1f} us/batch)"
    )
    print(
        f"   ember BatchDataLoader:                      {ember_rate:12,.0f} items/s "
        f"({_us_per_batch(ember_rate):5.1f} us/batch)"
    )
    print(f"   ratio: {ember_rate / torch_rate:.2f}x  (target >= 3x)")
    print("   the same, with a batcher that returns the list (the loaders' own cost per batch):")
    ember = BatchDataLoader(InMemDataset(rows), list_batcher, batch_size=32, seed=0)
    reference = torch.utils.data.DataLoader(
        rows,
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=lambda items: list_batcher(items, cpu),
    )
    ember_rate = items_per_second(ember, n, repeats)
    torch_rate = items_per_second(reference, n, repeats)
    print(
        f"   torch: {_us_per_batch(torch_rate):5.1f} us/batch, ember: "
        f"{_us_per_batch(ember_rate):5.1f} us/batch, ratio {ember_rate / torch_rate:.2f}x"
    )

    batcher = MatmulBatcher(target_s=1e-3)
    heavy_n = n // 4
    heavy = InMemDataset(rows[:heavy_n])
    per_batch_ms = batcher._time_matmul() * 1e3
    print(
        f"2. GIL-releasing batcher ({batcher.size}x{batcher.size} matmul, {per_batch_ms:.2f} ms "
        f"a batch): {heavy_n} items, batch 32, median of {repeats} passes"
    )
    rates = {}
    for workers in (1, 2):
        with MultiThreadDataLoader(
            heavy, batcher, num_workers=workers, batch_size=32, seed=0
        ) as loader:
            rates[workers] = items_per_second(loader, heavy_n, repeats)
        print(f"   MultiThreadDataLoader, {workers} worker(s): {rates[workers]:12,.0f} items/s")
    print(f"   ratio 2 vs 1 workers: {rates[2] / rates[1]:.2f}x  (target >= 1.6x)")


if __name__ == "__main__":
    main()
