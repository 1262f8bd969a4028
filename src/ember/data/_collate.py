"""``default_collate``: torch's collation as an ember batcher, and its one-gather path.

A PyTorch user's data is often a ``torch.utils.data.TensorDataset`` batched by torch's default
collate: every item is a tuple of row tensors, and the batch stacks them column by column. Built
item by item, that is a Python call and a tensor view per row and column, then a stack per
column; the same batch is one index op per column (``tensor[indexes]``). :func:`gather_path`
gives the loaders that shortcut when, and only when, the result is the same batch: the dataset
is a ``TensorDataset`` and the batcher is :func:`default_collate`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ember._device import move_to_device

__all__ = ["default_collate", "gather_path"]


def default_collate(items: list[Any], device: torch.device) -> Any:
    """The batch of ``items`` on ``device``, collated as torch's ``default_collate`` does.

    Tensors and numpy arrays are stacked; Python floats become a float64 tensor and ints (not
    bools) an int64 tensor; mappings collate key by key, tuples (NamedTuples keep their type;
    a tuple stays a tuple, where torch makes a list) and lists position by position,
    dataclasses field by field (rebuilt as the same class); anything else (strings, ...) stays
    a list of the items. Every item must have the structure of the first. It is the loaders'
    batcher when none is given; over a ``torch.utils.data.TensorDataset`` they build the same
    batches with one index op per tensor.
    """
    return _collate(items, device)


def _collate(items: list[Any], device: torch.device) -> Any:
    # made on the device, or moved there column by column: no second walk over the batch
    first = items[0]
    if isinstance(first, torch.Tensor):
        return _on(torch.stack(items), device)
    if isinstance(first, np.ndarray | np.number):
        return _on(torch.as_tensor(np.stack(items)), device)
    if isinstance(first, float):  # through numpy: a third of torch.tensor(list)'s time
        return _on(torch.from_numpy(np.array(items, dtype=np.float64)), device)
    if isinstance(first, int) and not isinstance(first, bool):
        return _on(torch.from_numpy(np.array(items, dtype=np.int64)), device)
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        names = [field.name for field in dataclasses.fields(first) if field.init]
        values = {name: _collate([getattr(item, name) for item in items], device) for name in names}
        return type(first)(**values)
    if isinstance(first, Mapping):
        return {key: _collate([item[key] for item in items], device) for key in first}
    if isinstance(first, tuple | list):
        try:
            columns = [_collate(list(column), device) for column in zip(*items, strict=True)]
        except ValueError as error:
            lengths = sorted({len(item) for item in items})
            if len(lengths) == 1:
                raise  # a column's own error, not the structure's
            raise ValueError(
                f"the items of a batch must have the same structure: the first is a "
                f"{type(first).__name__} of {len(first)}, another has {lengths} entries; give "
                "DataLoaderBuilder a batcher for items of varying length"
            ) from error
        if isinstance(first, list):
            return columns
        return type(first)(*columns) if hasattr(first, "_fields") else tuple(columns)
    return list(items)


def _on(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    return tensor if tensor.device == device else tensor.to(device)


def gather_path(
    dataset: object, batcher: object, device: torch.device
) -> Callable[[list[int]], Any] | None:
    """A function building the batch on ``device`` of a list of dataset indexes with one
    index op per tensor, when that is the batch ``batcher`` would build from the items (else
    None)."""
    if batcher is not default_collate or type(dataset) is not TensorDataset:
        return None
    tensors: tuple[torch.Tensor, ...] = tuple(dataset.tensors)
    moved = any(tensor.device != device for tensor in tensors)

    def gather(indexes: list[int]) -> tuple[torch.Tensor, ...]:
        index = torch.tensor(indexes, dtype=torch.int64)
        batch = tuple(torch.index_select(tensor, 0, index) for tensor in tensors)
        return move_to_device(batch, device) if moved else batch

    return gather
