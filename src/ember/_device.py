"""Devices: normalising a device argument, and moving a whole batch to a device.

:func:`move_to_device` is how a loader that cannot build batches on the target device itself
(``TorchDataLoader``, whose batches come from torch's collate) puts them there.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, MutableMapping
from typing import Any, TypeVar, cast

import torch

__all__ = ["DeviceLike", "as_device", "available_device", "move_to_device"]

T = TypeVar("T")

DeviceLike = str | torch.device
"""A device as ``torch.device`` accepts it: ``"cpu"``, ``"cuda:1"`` or a ``torch.device``."""


def as_device(device: DeviceLike, name: str = "device") -> torch.device:
    """``device`` as a ``torch.device``; TypeError or ValueError naming ``name`` and the value."""
    if isinstance(device, torch.device):
        return device
    if not isinstance(device, str):
        raise TypeError(
            f"{name} must be a str or torch.device, got {device!r} ({type(device).__name__})"
        )
    try:
        return torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"{name} is not a valid device: {device!r} ({error})") from error


def available_device(device: DeviceLike, name: str = "device") -> torch.device:
    """:func:`as_device`, and ValueError if this machine has no such device (``"cuda:7"``
    without CUDA or with fewer GPUs): refused where it is written, not found out mid-run."""
    result = as_device(device, name)
    if result.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (result.index or 0) >= count:
            raise ValueError(
                f"{name} {str(result)!r} is not available on this machine: it has "
                f"{count} CUDA device{'s' if count != 1 else ''}"
                + (f" (cuda:0 to cuda:{count - 1})" if count else "; use 'cpu'")
            )
    elif result.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{name} {str(result)!r} is not available on this machine; use 'cpu'")
    return result


def move_to_device(batch: T, device: DeviceLike) -> T:
    """``batch`` with every tensor in it on ``device``; the input is not modified.

    Walks tuples (NamedTuples keep their type), lists, mutable mappings (a shallow copy of the
    same type), other mappings (as a dict) and dataclass instances (rebuilt with
    ``dataclasses.replace``, so fields with ``init=False`` are left as they are); any other value
    is returned unchanged.
    """
    return _move(batch, as_device(device))


def _move(batch: T, device: torch.device) -> T:
    result: Any
    if isinstance(batch, torch.Tensor):
        result = batch.to(device)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        changes = {
            field.name: _move(getattr(batch, field.name), device)
            for field in dataclasses.fields(batch)
            if field.init
        }
        result = dataclasses.replace(batch, **changes)
    elif isinstance(batch, tuple):
        moved = [_move(value, device) for value in batch]
        result = type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    elif isinstance(batch, list):
        result = [_move(value, device) for value in batch]
    elif isinstance(batch, MutableMapping):
        # A shallow copy keeps the mapping's type and extras (a defaultdict's factory, say).
        result = copy.copy(batch)
        for key, value in batch.items():
            result[key] = _move(value, device)
    elif isinstance(batch, Mapping):
        result = {key: _move(value, device) for key, value in batch.items()}
    else:
        result = batch
    return cast(T, result)  # same structure as batch, so still a T
