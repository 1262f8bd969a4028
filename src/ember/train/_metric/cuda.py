"""GPU memory and use, shown while training; "unavailable" where there is no CUDA device.

The metric is for people, not decisions: it is not numeric, and it never raises. It never
initialises CUDA itself: without a device it only asks ``torch.cuda.is_available()`` (which does
not initialise it), and on a machine whose GPUs this process has not used it says so instead of
creating a context on every GPU. Device-wide memory, utilisation and power come from NVML
(``pynvml``) when installed; without it, memory is what this process's allocator reserved.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ember._checks import check_real
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.resumable import check_state_fields

__all__ = ["CudaMetric", "GpuReading", "read_cuda"]

UNAVAILABLE = "unavailable"


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One GPU's state: memory in bytes, utilisation in percent and power in watts if known."""

    index: int
    memory_used: int
    memory_total: int
    utilization: float | None = None
    power: float | None = None

    def __str__(self) -> str:
        text = (
            f"GPU #{self.index} - Memory {self.memory_used / 1e9:.2f}/"
            f"{self.memory_total / 1e9:.2f} GB"
        )
        if self.utilization is not None:
            text += f" - Usage {self.utilization:g}%"
        if self.power is not None:
            text += f" - Power {self.power:.1f} W"
        return text


def _nvml(query: Callable[[int], int], index: int) -> int | None:
    try:
        return query(index)
    except Exception:  # pynvml missing or NVML failing: the value is simply not shown
        return None


def read_cuda() -> list[GpuReading] | None:
    """The state of every visible GPU; None without CUDA; ``[]`` if this process has not used it."""
    if not torch.cuda.is_available():
        return None
    if not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # unannotated in torch
        return []
    readings = []
    for index in range(torch.cuda.device_count()):
        total = torch.cuda.get_device_properties(index).total_memory
        used = _nvml(torch.cuda.device_memory_used, index)
        if used is None:
            used = torch.cuda.memory_reserved(index)
        power = _nvml(torch.cuda.power_draw, index)
        readings.append(
            GpuReading(
                index,
                used,
                total,
                _nvml(torch.cuda.utilization, index),
                None if power is None else power / 1000,  # mW
            )
        )
    return readings


class CudaMetric:
    """``Cuda``: memory used/total, utilisation and power of each GPU, or "unavailable".

    ``reader`` returns the GPUs' state (default ``read_cuda``; None means no CUDA). It is
    read at most every ``interval`` seconds, and a line is logged only when the text changes;
    :meth:`compute` gives the latest state as the epoch entry.
    """

    def __init__(
        self,
        reader: Callable[[], list[GpuReading] | None] = read_cuda,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.2,
    ) -> None:
        if not callable(reader):
            raise TypeError(f"reader must be callable, got {reader!r}")
        interval = check_real("interval (seconds)", interval, minimum=0.0)
        self._reader = reader
        self._clock = clock
        self._interval = float(interval)
        self._last: float | None = None
        self._text: str | None = None

    @property
    def name(self) -> str:
        """``Cuda``."""
        return "Cuda"

    @property
    def input_type(self) -> type[Any]:
        """Reads nothing from the output."""
        return object

    def _read(self) -> str:
        try:
            readings = self._reader()
        except Exception as error:  # a monitoring metric must never stop training
            return f"{UNAVAILABLE} ({type(error).__name__}: {error})"
        if readings is None:
            return UNAVAILABLE
        if not readings:
            return "CUDA not in use by this process"
        return " | ".join(str(reading) for reading in readings)

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Read the GPUs if ``interval`` has passed; log the text when it changed."""
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        self._last = now
        text = self._read()
        if text == self._text:
            return MetricEntry(self.name, text, MetricEntry.NOT_AVAILABLE)
        self._text = text
        return MetricEntry(self.name, text, text)

    def compute(self) -> MetricEntry:
        """The latest state."""
        text = self._text if self._text is not None else self._read()
        return MetricEntry(self.name, text, text)

    def clear(self) -> None:
        """Start a new epoch: its first batch reads and logs."""
        self._last = None
        self._text = None

    def state_dict(self) -> dict[str, Any]:
        """The latest text logged (``StatefulMetric``)."""
        return {"text": self._text}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from the latest text logged; the next batch reads the GPUs again."""
        text = check_state_fields(self, state, ("text",))["text"]
        if text is not None and not isinstance(text, str):
            raise ValueError(f"the saved state of metric 'Cuda' holds text={text!r}, not a str")
        self._text, self._last = text, None

    def __repr__(self) -> str:
        return "CudaMetric()"
