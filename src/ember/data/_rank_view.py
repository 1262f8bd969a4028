"""One rank's view of any loader in a data-parallel job, chosen by the kind of loader.

A data-parallel strategy places each loader it is given on this rank's device and asks for
this rank's view of it: ember's own loaders (``BatchDataLoader``, ``MultiThreadDataLoader``,
``StreamingDataLoader``) get a :class:`~ember.data.ShardedDataLoader` (``_shard.py``), a user's
``TorchDataLoader`` gets :class:`TorchShares` (``_sampler_shares.py``) where the strategy takes
torch loaders, and any other loader is refused with an error naming the strategy and the
loader. Both views yield this rank's batch (or None) per global batch and keep every rank's
share sizes in their iterator's ``shares``.
"""

from __future__ import annotations

from typing import Any

import torch

from ember.data._loader import BatchingLoader, DataLoader
from ember.data._sampler_shares import SharesIterator, TorchShares
from ember.data._shard import ShardedDataLoader, ShardIterator
from ember.data._torch_loader import TorchDataLoader

__all__ = ["RankView", "RankViewIterator", "rank_view"]

RankView = ShardedDataLoader[Any] | TorchShares
RankViewIterator = ShardIterator[Any] | SharesIterator


def rank_view(
    loader: DataLoader[Any],
    device: torch.device,
    rank: int,
    world: int,
    *,
    name: str,
    strategy: str,
    torch_loaders: bool = True,
) -> RankView:
    """Rank ``rank`` of ``world``'s view of ``loader`` (the ``name`` loader), on ``device``.

    ``strategy`` names the data-parallel strategy in the error for a loader it cannot shard;
    ``torch_loaders=False`` refuses a ``TorchDataLoader`` too.
    """
    if torch_loaders and isinstance(loader, TorchDataLoader):
        return TorchShares(loader.to_device(device), rank, world)
    if not isinstance(loader, BatchingLoader):
        kinds = "BatchDataLoader/MultiThreadDataLoader/StreamingDataLoader"
        if torch_loaders:
            kinds += " and TorchDataLoader"
        raise TypeError(
            f"{strategy} shards ember's {kinds}; the {name} loader is a {type(loader).__name__}"
        )
    return ShardedDataLoader(loader.to_device(device), rank, world)
