"""ember's data layer: datasets, batchers and deterministic data loaders (Burn's, on PyTorch).

``DataLoaderBuilder(batcher).batch_size(32).shuffle(7).num_workers(2).build(dataset)`` is the
usual entry point. Loaders yield the same batches whatever the number of worker threads (B1),
keep their shuffle stream when moved to a device (B2), and save and restore their position
exactly (B4); see ``docs/data.md``. This package never imports ``ember.train``.
"""

from ember.data.batcher import Batcher, BatchFn
from ember.data.builder import DataLoaderBuilder
from ember.data.dataset import (
    ComposedDataset,
    Dataset,
    InMemDataset,
    MapperDataset,
    PartialDataset,
    SamplerDataset,
    ShuffledDataset,
    WindowsDataset,
)
from ember.data.device import DeviceLike, move_to_device
from ember.data.loader import BatchDataLoader, DataLoader, DataLoaderIterator, Progress
from ember.data.multithread import MultiThreadDataLoader
from ember.data.shard import ShardedDataLoader
from ember.data.torch_loader import TorchDataLoader
from ember.errors import DataLoaderError

__all__ = [
    "BatchDataLoader",
    "BatchFn",
    "Batcher",
    "ComposedDataset",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderError",
    "DataLoaderIterator",
    "Dataset",
    "DeviceLike",
    "InMemDataset",
    "MapperDataset",
    "MultiThreadDataLoader",
    "PartialDataset",
    "Progress",
    "SamplerDataset",
    "ShardedDataLoader",
    "ShuffledDataset",
    "TorchDataLoader",
    "WindowsDataset",
    "move_to_device",
]
