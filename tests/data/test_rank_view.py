"""ember.data._rank_view: which view a data-parallel strategy gets for each kind of loader."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from ember.data import BatchDataLoader, ShardedDataLoader, TorchDataLoader, default_collate
from ember.data._rank_view import rank_view
from ember.data._sampler_shares import TorchShares

CPU = torch.device("cpu")


def tensors() -> TensorDataset:
    return TensorDataset(torch.arange(10.0).unsqueeze(1))


def test_ember_s_loaders_get_a_sharded_view_and_torch_s_their_shares() -> None:
    ours = BatchDataLoader(tensors(), default_collate, batch_size=4)
    view = rank_view(ours, CPU, 1, 2, name="train", strategy="DistributedDataParallel")
    assert isinstance(view, ShardedDataLoader)
    assert [b[0].flatten().tolist() for b in view if b is not None] == [
        [2.0, 3.0],
        [6.0, 7.0],
        [9.0],
    ]
    theirs: TorchDataLoader[Any] = TorchDataLoader(TorchLoader(tensors(), batch_size=4))
    shares = rank_view(theirs, CPU, 1, 2, name="train", strategy="DistributedDataParallel")
    assert isinstance(shares, TorchShares)
    assert [batch[0].flatten().tolist() for batch in shares] == [[2.0, 3.0], [6.0, 7.0], [9.0]]


def test_a_loader_the_strategy_cannot_shard_is_refused_naming_both() -> None:
    with pytest.raises(
        TypeError,
        match=r"^DistributedDataParallel shards ember's .* and "
        r"TorchDataLoader; the valid loader is a list$",
    ):
        rank_view([1, 2], CPU, 0, 2, name="valid", strategy="DistributedDataParallel")  # type: ignore[arg-type]
    theirs: TorchDataLoader[Any] = TorchDataLoader(TorchLoader(tensors(), batch_size=4))
    with pytest.raises(
        TypeError,
        match=r"^FullyShardedDataParallel shards ember's "
        r"BatchDataLoader/MultiThreadDataLoader/StreamingDataLoader; the train "
        r"loader is a TorchDataLoader$",
    ):
        rank_view(
            theirs,
            CPU,
            0,
            2,
            name="train",
            strategy="FullyShardedDataParallel",
            torch_loaders=False,
        )
