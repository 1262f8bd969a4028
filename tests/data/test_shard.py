"""ShardedDataLoader: each rank's share of every global batch (pure Python, no processes)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import BatchDataLoader, DataLoaderBuilder, InMemDataset, TorchDataLoader
from ember.data._shard import ShardedDataLoader, share_bounds, share_sizes


def identity(items: list[int], device: torch.device) -> list[int]:
    return list(items)


def build(
    items: int, batch_size: int, seed: int | None, workers: int = 0
) -> BatchDataLoader[Any, Any]:
    builder = DataLoaderBuilder(identity).batch_size(batch_size).num_workers(workers)
    if seed is not None:
        builder = builder.shuffle(seed)
    return builder.build(InMemDataset(list(range(items))))


@settings(max_examples=60, deadline=None)
@given(
    items=st.integers(1, 120),
    batch_size=st.integers(1, 40),
    world_size=st.integers(1, 7),
    seed=st.none() | st.integers(0, 2**31),
)
def test_shares_partition_every_global_batch(
    items: int, batch_size: int, world_size: int, seed: int | None
) -> None:
    """Over two epochs the ranks' shares, joined in rank order, are exactly each global batch;
    sizes differ by at most one, rank 0's is never empty, and progress, len and state are the
    global loader's."""
    loader = build(items, batch_size, seed)
    views = [ShardedDataLoader(loader, rank, world_size) for rank in range(world_size)]
    for _ in range(2):
        passes = [iter(view) for view in views]
        reference = iter(loader)
        for batch in reference:
            parts = [next(p) for p in passes]
            shares = passes[0].shares
            assert sum(shares) == len(batch)
            assert max(shares) - min(shares) <= 1 and shares[0] == max(shares) >= 1
            joined = [item for part in parts if part is not None for item in part]
            assert joined == batch
            for rank, (part, p) in enumerate(zip(parts, passes, strict=True)):
                assert p.shares == shares
                assert (part is None) == (shares[rank] == 0)
                assert p.progress() == reference.progress()
        for p in passes:
            with pytest.raises(StopIteration):
                next(p)
    for view in views:
        assert len(view) == len(loader) and view.num_items() == loader.num_items()
        assert view.state_dict() == loader.state_dict()


@given(items=st.integers(0, 50), world_size=st.integers(1, 9))
def test_share_bounds_tile_the_batch(items: int, world_size: int) -> None:
    """The bounds of consecutive ranks meet, cover the batch and have the sizes' lengths."""
    bounds = [share_bounds(items, rank, world_size) for rank in range(world_size)]
    assert bounds[0][0] == 0 and bounds[-1][1] == items
    assert all(a[1] == b[0] for a, b in itertools.pairwise(bounds))
    assert [end - start for start, end in bounds] == list(share_sizes(items, world_size))


def test_state_of_one_rank_restores_every_rank_mid_epoch() -> None:
    """A state saved by rank 0 in the middle of an epoch resumes every rank at the next batch,
    with worker threads on one side and none on the other."""
    loader = build(30, 4, seed=3)
    views = [ShardedDataLoader(build(30, 4, seed=3, workers=2), r, 3) for r in range(3)]
    saved = views[0]
    it = iter(saved)
    for _ in range(3):
        next(it)
    state = saved.state_dict()
    expected_rest = []
    for _ in range(5):
        expected_rest.append(next(it))
    for rank in range(3):
        fresh = ShardedDataLoader(loader, rank, 3)
        fresh.load_state_dict(state)
        rest = list(iter(fresh))
        if rank == 0:
            assert rest == expected_rest
        original = ShardedDataLoader(loader, rank, 3)
        whole = list(iter(original))
        assert rest == whole[3:]
    for view in views:
        view.close()


def test_view_starts_where_the_loader_stands_and_does_not_move_it() -> None:
    """A view of a loader in its second epoch shards that epoch; the loader stays put."""
    loader = build(10, 4, seed=1)
    list(iter(loader))
    before = loader.state_dict()
    view = ShardedDataLoader(loader, 1, 2)
    second = list(iter(loader))
    assert view.state_dict() == before
    assert list(iter(view)) == [batch[len(batch) - len(batch) // 2 :] or None for batch in second]


def test_to_device_and_slice_keep_the_rank() -> None:
    """``to_device`` keeps rank and position; ``slice`` shards the slice."""
    loader = build(12, 4, seed=None)
    view = ShardedDataLoader(loader, 1, 2)
    it = iter(view)
    next(it)
    moved = view.to_device("cpu")
    assert list(iter(moved)) == [[6, 7], [10, 11]]
    sliced = view.slice(0, 6)
    assert (sliced.rank, sliced.world_size) == (1, 2)
    assert list(iter(sliced)) == [[2, 3], [5]]


def test_refuses_bad_arguments() -> None:
    """Rank out of range, a zero world size, a loader without an epoch plan."""
    loader = build(8, 4, seed=None)
    with pytest.raises(ValueError, match="rank must be < world_size"):
        ShardedDataLoader(loader, 2, 2)
    with pytest.raises(ValueError, match="world_size"):
        ShardedDataLoader(loader, 0, 0)
    dataset = torch.utils.data.TensorDataset(torch.arange(8))
    torch_loader: TorchDataLoader[list[torch.Tensor]] = TorchDataLoader(
        torch.utils.data.DataLoader(dataset, batch_size=4)
    )
    with pytest.raises(TypeError, match="DistributedSampler"):
        ShardedDataLoader(torch_loader, 0, 2)  # type: ignore[arg-type]


def test_loader_plan_hooks_follow_the_passes() -> None:
    """``epoch_plan`` is the plan ``iter()`` follows and moves nothing; ``follow_pass`` runs the
    next pass with another builder of each chunk."""
    loader = build(10, 4, seed=5)
    plan = loader.epoch_plan(1)
    assert loader.state_dict()["epoch"] == 0
    assert list(iter(loader)) == list(plan)
    assert loader.state_dict()["epoch"] == 1
    assert list(loader.follow_pass(sorted)) == [sorted(indexes) for indexes in loader.epoch_plan(2)]
    assert loader.state_dict()["epoch"] == 2
    with pytest.raises(ValueError, match="epoch"):
        loader.epoch_plan(0)
