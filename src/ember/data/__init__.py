"""ember's data layer: datasets, batchers and deterministic data loaders (Burn's, on PyTorch).

``DataLoaderBuilder(batcher).batch_size(32).shuffle(7).num_workers(2).build(dataset)`` is the
usual entry point. Loaders yield the same batches whatever the number of worker threads ("same
batches"), keep their shuffle stream when moved to a device ("stable stream"), and save and
restore their position exactly ("exact resume"); a streaming source (an ``IterableDataset``, a
generator function) gets a ``StreamingDataLoader``; see ``docs/data.md``. This package never
imports ``ember.train``."""

from ember._device import DeviceLike, move_to_device
from ember._errors import DataLoaderError
from ember.data._batcher import Batcher, BatchFn
from ember.data._builder import DataLoaderBuilder
from ember.data._collate import default_collate
from ember.data._dataset import (
    ComposedDataset,
    Dataset,
    InMemDataset,
    MapperDataset,
    PartialDataset,
    SamplerDataset,
    ShuffledDataset,
    WindowsDataset,
)
from ember.data._loader import BatchDataLoader, DataLoader, DataLoaderIterator
from ember.data._module import DataModule
from ember.data._multithread import MultiThreadDataLoader
from ember.data._pass import Progress
from ember.data._shard import ShardedDataLoader
from ember.data._stream import StatefulSource, StreamingDataLoader
from ember.data._torch_loader import TorchDataLoader

__all__ = [
    "BatchDataLoader",
    "BatchFn",
    "Batcher",
    "ComposedDataset",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderError",
    "DataLoaderIterator",
    "DataModule",
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
    "StatefulSource",
    "StreamingDataLoader",
    "TorchDataLoader",
    "WindowsDataset",
    "default_collate",
    "move_to_device",
]
