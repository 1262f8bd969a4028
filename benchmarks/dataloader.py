"""Data loader throughput, measured side by side in one run (targets: docs/design.md; not a test).

1. ``BatchDataLoader`` against ``torch.utils.data.DataLoader(num_workers=0)`` on the same rows
   (a 4-float tensor and a float each), batch 32, shuffled: first torch with its default
   collate (how torch users run it) against ember with a stacking batcher building the same
   batch — target >= 3x items/s; then both with the same stacking batcher; then with a batcher
   that returns its list, which isolates what the loaders themselves cost per batch.
2. ``MultiThreadDataLoader`` with 2 workers against 1 worker, on a batcher that releases the GIL
   (a torch matmul sized to take about 1 ms with one intra-op thread); target >= 1.6x.

The contenders' passes are interleaved, so drift on a shared machine hits both alike; each
figure is the median of the repeats. Part 2 also prints how well 2 plain threads scale on the
same matmuls, interleaved: the ceiling for the workers' ratio when the machine is shared.
``--quick`` for a short run.

    python benchmarks/dataloader.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ember.data import BatchDataLoader, InMemDataset, MultiThreadDataLoader

Row = tuple[torch.Tensor, float]
Batch = tuple[torch.Tensor, torch.Tensor]
BATCH_SIZE = 32
CPU = torch.device("cpu")


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
        self.size = 64
        self.weight = torch.randn(self.size, self.size)
        while self.matmul_seconds() < target_s and self.size < 4096:
            self.size = int(self.size * 1.1)
            self.weight = torch.randn(self.size, self.size)

    def matmul_seconds(self) -> float:
        return statistics.median(_seconds(lambda: self.weight @ self.weight) for _ in range(9))

    def batch(self, items: list[Row], device: torch.device) -> Batch:
        xs, ys = stack_batcher(items, device)
        return xs, ys + (self.weight @ self.weight)[0, 0]


def _seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_pass(loader: Iterable[Any]) -> Callable[[], None]:
    """A function running one full pass over ``loader``."""

    def run() -> None:
        for _ in loader:
            pass

    return run


def rates(runs: dict[str, Callable[[], None]], n: int, repeats: int) -> dict[str, float]:
    """Median items/s of each run of ``n`` items over ``repeats`` interleaved repeats, after a
    warm-up run of each."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(repeats):
        for name, run in runs.items():
            times[name].append(_seconds(run))
    return {name: n / statistics.median(seconds) for name, seconds in times.items()}


def _us_per_batch(items_per_s: float) -> float:
    return BATCH_SIZE / items_per_s * 1e6


def torch_loader(rows: list[Row], batcher: Callable[[list[Row], torch.device], Any] | None) -> Any:
    """torch's loader with ``batcher`` as ``collate_fn``, or its own default collate (None)."""
    return torch.utils.data.DataLoader(
        rows,  # type: ignore[arg-type]  # a plain list, torch's fastest dataset, works
        batch_size=BATCH_SIZE,
        shuffle=True,
        generator=torch.Generator().manual_seed(0),
        collate_fn=None if batcher is None else lambda items: batcher(items, CPU),
    )


def compare_with_torch(rows: list[Row], repeats: int) -> None:
    n = len(rows)
    print(f"1. in-memory rows: {n} items, batch {BATCH_SIZE}, shuffled, median of {repeats}")
    cases: tuple[tuple[str, Any, Any], ...] = (
        ("torch's default collate vs ember's stacking batcher", None, stack_batcher),
        ("the same stacking batcher in both", stack_batcher, stack_batcher),
        ("a batcher that returns its list (the loaders alone)", list_batcher, list_batcher),
    )
    for label, collate, batcher in cases:
        measured = rates(
            {
                "torch": one_pass(torch_loader(rows, collate)),
                "ember": one_pass(
                    BatchDataLoader(InMemDataset(rows), batcher, batch_size=BATCH_SIZE, seed=0)
                ),
            },
            n,
            repeats,
        )
        ratio = measured["ember"] / measured["torch"]
        print(f"   {label}:")
        for name, title in (("torch", "torch DataLoader"), ("ember", "ember BatchDataLoader")):
            print(
                f"     {title:22} {measured[name]:12,.0f} items/s "
                f"({_us_per_batch(measured[name]):5.1f} us/batch)"
            )
        print(f"     ratio {ratio:.2f}x")
    print("   target (docs/design.md): >= 3x against torch's loader as torch users run it")


def plain_threads(batcher: MatmulBatcher, matmuls: int, threads: int) -> Callable[[], None]:
    """A function running ``matmuls`` of the batcher's matmuls on ``threads`` plain threads."""

    def work() -> None:
        torch.get_num_threads()  # apply torch.set_num_threads(1) here, as ember's workers do
        for _ in range(matmuls // threads):
            batcher.weight @ batcher.weight

    def run() -> None:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()

    return run


def compare_workers(rows: list[Row], repeats: int) -> None:
    batcher = MatmulBatcher(target_s=1e-3)
    n = len(rows)
    print(
        f"2. GIL-releasing batcher ({batcher.size}x{batcher.size} matmul, "
        f"{batcher.matmul_seconds() * 1e3:.2f} ms a batch): {n} items, batch {BATCH_SIZE}, "
        f"median of {repeats}"
    )
    dataset = InMemDataset(rows)
    with (
        MultiThreadDataLoader(
            dataset, batcher, num_workers=1, batch_size=BATCH_SIZE, seed=0
        ) as one,
        MultiThreadDataLoader(
            dataset, batcher, num_workers=2, batch_size=BATCH_SIZE, seed=0
        ) as two,
    ):
        batches = -(-n // BATCH_SIZE)
        measured = rates(
            {
                "1 worker": one_pass(one),
                "2 workers": one_pass(two),
                "plain 1": plain_threads(batcher, batches, 1),
                "plain 2": plain_threads(batcher, batches, 2),
            },
            n,
            repeats,
        )
    for name in ("1 worker", "2 workers"):
        print(f"   MultiThreadDataLoader, {name:9}: {measured[name]:10,.0f} items/s")
    print(
        f"   ratio 2 vs 1 workers: {measured['2 workers'] / measured['1 worker']:.2f}x "
        "(target >= 1.6x)"
    )
    print(
        "   for reference, 2 plain threads vs 1 on the same matmuls: "
        f"{measured['plain 2'] / measured['plain 1']:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer items and repeats")
    args = parser.parse_args()
    n, repeats = (5_000, 3) if args.quick else (20_000, 9)
    torch.set_num_threads(1)  # one intra-op thread: the workers are what should scale
    rows = make_rows(n)
    compare_with_torch(rows, repeats)
    compare_workers(rows[: n // 4], repeats)


if __name__ == "__main__":
    main()
