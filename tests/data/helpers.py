"""Functions shared by the data layer's tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

import torch

JOIN_TIMEOUT_S = 5.0

Batch = tuple[list[int], torch.device]


def item_batcher(items: list[int], device: torch.device) -> Batch:
    """A batcher that returns its items and device, so tests can see exactly what was batched."""
    return items, device


def batches_of(loader: Iterable[Batch]) -> list[list[int]]:
    """The items of every batch of one pass."""
    return [items for items, _ in loader]


def epochs_of(loader: Iterable[Batch], epochs: int) -> list[list[int]]:
    """The items of every batch of ``epochs`` passes, concatenated."""
    return [items for _ in range(epochs) for items in batches_of(loader)]


def assert_threads_exit(baseline: set[threading.Thread]) -> None:
    """Every thread started since ``baseline`` ends (each joined with a timeout)."""
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for thread in set(threading.enumerate()) - baseline:
        thread.join(max(deadline - time.monotonic(), 0.0))
    leftover = [thread.name for thread in threading.enumerate() if thread not in baseline]
    assert leftover == []
