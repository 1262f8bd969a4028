"""ember's data layer in one page: build a shuffled loader with 2 worker threads, run 2 epochs,
then save its position mid-epoch and resume it in a fresh loader without workers; finally
stream the same samples from a generator function, shuffled through a buffer.

    python examples/data_loading.py
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset


@dataclass(frozen=True)
class Sample:
    """One regression sample: 4 features and a target."""

    x: torch.Tensor  # shape (4,)
    y: torch.Tensor  # shape (1,)


@dataclass(frozen=True)
class Batch:
    x: torch.Tensor  # shape (batch, 4)
    y: torch.Tensor  # shape (batch, 1)


def samples(n: int, seed: int = 0) -> list[Sample]:
    """Synthetic data: y = x · w + noise."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    w = torch.tensor([[1.5], [-2.0], [0.5], [3.0]])
    y = x @ w + 0.1 * torch.randn(n, 1, generator=generator)
    return [Sample(xi, yi) for xi, yi in zip(x, y, strict=True)]


class SampleBatcher:
    """Stacks samples into one batch on the loader's device (torch ops release the GIL)."""

    def batch(self, items: list[Sample], device: torch.device) -> Batch:
        return Batch(
            x=torch.stack([s.x for s in items]).to(device),
            y=torch.stack([s.y for s in items]).to(device),
        )


def build(workers: int) -> DataLoader[Batch]:
    builder = DataLoaderBuilder(SampleBatcher()).batch_size(32).shuffle(7).num_workers(workers)
    return builder.build(InMemDataset(samples(200)))


def main() -> None:
    loader = build(workers=2)
    print(f"{loader!r}: {loader.num_items()} items in {len(loader)} batches a pass")
    for epoch in (1, 2):
        iterator = iter(loader)
        for number, batch in enumerate(iterator, start=1):
            progress = iterator.progress()
            print(
                f"epoch {epoch} batch {number}/{len(loader)}: "
                f"x {tuple(batch.x.shape)!s:<8} y {tuple(batch.y.shape)!s:<8} "
                f"{progress.items_processed:>3}/{progress.items_total} {progress.unit}"
            )

    iterator = iter(loader)  # epoch 3: stop after 3 batches and save the position
    for _ in range(3):
        next(iterator)
    state = json.dumps(loader.state_dict())
    print(f"\nstate after 3 batches of epoch 3: {state}")
    rest = [batch.y for batch in iterator]

    resumed = build(workers=0)  # other worker count, same batches ("same batches", "exact resume")
    resumed.load_state_dict(json.loads(state))
    resumed_iterator = iter(resumed)
    again = [batch.y for batch in resumed_iterator]
    print(
        f"resumed without workers: {len(again)} batches, progress "
        f"{resumed_iterator.progress().items_processed}/{resumed.num_items()}, identical to "
        f"the original's: {str(all(map(torch.equal, rest, again))).lower()}"
    )
    loader.close()
    resumed.close()

    def streamed() -> Iterator[Sample]:  # a generator function: called once per pass
        yield from samples(200)

    stream = (
        DataLoaderBuilder(SampleBatcher())
        .batch_size(32)
        .shuffle(7, buffer_size=64)  # a stream is shuffled through a buffer of 64 samples
        .num_workers(2)
        .build(streamed)
    )
    iterator = iter(stream)
    progress = [iterator.progress() for _ in iterator]
    print(
        f"\nstreamed: {len(progress)} batches; progress {progress[0]} first, "
        f"{progress[-1]} on the last batch (a stream's total is known once it ends)"
    )
    stream.close()


if __name__ == "__main__":
    main()
