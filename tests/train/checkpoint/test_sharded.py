"""Reassembling a sharded tensor from its saved pieces, for any old and new sharding."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.train._checkpoint.sharded import assemble


def chunks(tensor: torch.Tensor, count: int) -> list[tuple[list[int], torch.Tensor]]:
    """FSDP's sharding of ``tensor`` over ``count`` ranks (torch.chunk on dim 0; trailing
    ranks may be empty), each piece with its offsets."""
    pieces, start = [], 0
    for piece in torch.chunk(tensor, count, dim=0):
        pieces.append(([start] + [0] * (tensor.dim() - 1), piece))
        start += piece.shape[0]
    return pieces


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 9),
    cols=st.integers(1, 4),
    saved=st.integers(1, 5),
    loaded=st.integers(1, 5),
)
def test_every_new_shard_is_assembled_from_the_old_ones(
    rows: int, cols: int, saved: int, loaded: int
) -> None:
    """Saved over `saved` ranks, loaded over `loaded`: each new region equals the global
    tensor's slice, every value covered, and only overlapping pieces read."""
    full = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    reads: list[int] = []

    def reader(index: int, tensor: torch.Tensor) -> torch.Tensor:
        reads.append(index)
        return tensor

    pieces = [
        (offsets, list(t.shape), lambda i=i, t=t: reader(i, t))
        for i, (offsets, t) in enumerate(chunks(full, saved))
    ]
    for offsets, expected in chunks(full, loaded):
        reads.clear()
        region, covered = assemble(offsets, list(expected.shape), torch.float32, pieces)
        assert torch.equal(region, expected)
        assert covered == expected.numel()
        low, high = offsets[0], offsets[0] + expected.shape[0]
        for index in reads:
            start, shape = pieces[index][0][0], pieces[index][1][0]
            assert start < high and low < start + shape


def test_a_missing_piece_leaves_values_uncovered() -> None:
    full = torch.ones(4, 2)
    (first, a), (_, _) = chunks(full, 2)
    region, covered = assemble([0, 0], [4, 2], torch.float32, [(first, [2, 2], lambda: a)])
    assert covered == 4 and region.shape == (4, 2)


def test_a_scalar_is_one_piece() -> None:
    value = torch.tensor(3.0)
    region, covered = assemble([], [], torch.float32, [([], [], lambda: value)])
    assert covered == 1 and torch.equal(region, value)
