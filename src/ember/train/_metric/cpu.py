"""System metrics of the host: CPU use and used memory, read at most every 200 ms.

Both read the system through a *reader*, a function that can be replaced (tests give a
deterministic one). The defaults read ``/proc`` on Linux and fall back to ``psutil`` elsewhere
when it is installed (it is not a dependency of ember). Without either, the metric logs nothing.

A reading is taken at a batch only when ``interval`` has passed since the previous one; batches in
between log nothing, so each reading is logged once and the epoch value is the plain mean of the
epoch's readings (Burn repeats the last reading at the epoch end, counting it twice).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from ember._checks import check_real
from ember._rundir.metric_logs import NumericEntry
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.resumable import check_state_fields, state_count
from ember.train._metric.state import MeanMetric

__all__ = [
    "CpuMemory",
    "CpuUse",
    "default_cpu_times_reader",
    "default_memory_reader",
    "read_proc_meminfo",
    "read_proc_stat",
]

CpuTimesReader = Callable[[], tuple[float, float]]
"""Returns the cumulative ``(idle, total)`` CPU time of all cores, in any fixed unit."""
MemoryReader = Callable[[], tuple[float, float]]
"""Returns ``(used, total)`` memory in bytes."""

_NOT_AVAILABLE = "N/A"


def read_proc_stat(path: str | Path = "/proc/stat") -> tuple[float, float]:
    """Cumulative ``(idle, total)`` jiffies of all cores from the ``cpu`` line of ``/proc/stat``.

    Idle includes iowait; guest time is already part of user time and is not added twice.
    """
    with open(path, encoding="ascii") as file:
        fields = file.readline().split()
    if not fields or fields[0] != "cpu":
        raise OSError(f"no aggregate cpu line in {str(path)!r}")
    values = [float(field) for field in fields[1:9]]  # user … steal
    return values[3] + (values[4] if len(values) > 4 else 0.0), sum(values)


def read_proc_meminfo(path: str | Path = "/proc/meminfo") -> tuple[float, float]:
    """``(used, total)`` bytes from ``/proc/meminfo``: used is total minus available."""
    info: dict[str, float] = {}
    with open(path, encoding="ascii") as file:
        for line in file:
            key, _, rest = line.partition(":")
            if key in ("MemTotal", "MemAvailable", "MemFree"):
                info[key] = float(rest.split()[0]) * 1024  # kB
    total = info["MemTotal"]
    available = info.get("MemAvailable", info.get("MemFree", 0.0))
    return total - available, total


def _psutil() -> ModuleType | None:
    """psutil if installed (optional, used only where /proc is missing)."""
    try:
        return importlib.import_module("psutil")
    except ImportError:
        return None


def _psutil_cpu_times() -> tuple[float, float]:
    psutil = _psutil()
    if psutil is None:
        raise OSError("psutil is not installed")
    times = psutil.cpu_times()
    counted = {k: v for k, v in times._asdict().items() if k not in ("guest", "guest_nice")}
    idle = counted.get("idle", 0.0) + counted.get("iowait", 0.0)
    return idle, sum(counted.values())


def _psutil_memory() -> tuple[float, float]:
    psutil = _psutil()
    if psutil is None:
        raise OSError("psutil is not installed")
    memory = psutil.virtual_memory()
    return float(memory.total - memory.available), float(memory.total)


def default_cpu_times_reader() -> CpuTimesReader | None:
    """``/proc/stat`` on Linux, else ``psutil`` if installed, else None."""
    if sys.platform.startswith("linux") and Path("/proc/stat").exists():
        return read_proc_stat
    return _psutil_cpu_times if _psutil() is not None else None


def default_memory_reader() -> MemoryReader | None:
    """``/proc/meminfo`` on Linux, else ``psutil`` if installed, else None."""
    if sys.platform.startswith("linux") and Path("/proc/meminfo").exists():
        return read_proc_meminfo
    return _psutil_memory if _psutil() is not None else None


class _SystemMetric(MeanMetric):
    """Shared refresh logic: a reading at most every ``interval`` seconds, each logged once."""

    def __init__(self, clock: Callable[[], float], interval: float) -> None:
        interval = check_real("interval (seconds)", interval, minimum=0.0)
        super().__init__()
        self._clock = clock
        self._interval = float(interval)
        self._last: float | None = None
        self._readings = 0

    def _due(self) -> bool:
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            return False
        self._last = now
        return True

    def _not_available(self) -> MetricEntry:
        return MetricEntry(self.name, _NOT_AVAILABLE, MetricEntry.NOT_AVAILABLE)

    def _record(self, value: float) -> MetricEntry:
        self._readings += 1
        return self._state.update(value, 1)

    def clear(self) -> None:
        """Start a new epoch: its first batch takes a reading."""
        super().clear()
        self._last = None
        self._readings = 0

    def state_dict(self) -> dict[str, Any]:
        """The epoch's readings so far (``StatefulMetric``)."""
        return {**super().state_dict(), "readings": self._readings}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch's mean; the next batch takes a reading (a reading measures this
        machine now, so none is carried across a resume)."""
        super().load_state_dict(state)
        self._readings = state_count(
            check_state_fields(self, state, ("readings",)), self, "readings"
        )
        self._last = None

    def value(self) -> NumericEntry | None:
        """The latest reading, or None before the first."""
        return self._state.value() if self._readings else None


class CpuUse(_SystemMetric):
    """``CPU Usage``: the percent of CPU time spent busy, over all cores, since the last reading.

    ``reader`` returns cumulative ``(idle, total)`` CPU times (default: ``/proc/stat``, or
    ``psutil``); ``clock`` gives seconds. A split's first batch only takes the baseline; if a split
    ends before any reading, :meth:`compute` takes one.
    """

    metric_name = "CPU Usage"
    unit = "%"

    def __init__(
        self,
        reader: CpuTimesReader | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.2,
    ) -> None:
        super().__init__(clock, interval)
        self._reader = reader if reader is not None else default_cpu_times_reader()
        self._baseline: tuple[float, float] | None = None

    def _read(self) -> tuple[float, float] | None:
        if self._reader is None:
            return None
        try:
            return self._reader()
        except OSError:  # a transient /proc read failure must not stop training
            return None

    def _reading(self) -> float | None:
        """Busy percent since the baseline, moving the baseline; None without a usable delta."""
        times = self._read()
        if times is None:
            return None
        baseline, self._baseline = self._baseline, times
        if baseline is None:
            return None
        idle, total = times[0] - baseline[0], times[1] - baseline[1]
        if total <= 0:
            return None
        return min(100.0, max(0.0, 100.0 * (total - idle) / total))

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Take a reading if ``interval`` has passed since the last one."""
        if not self._due():
            return self._not_available()
        percent = self._reading()
        return self._not_available() if percent is None else self._record(percent)

    def compute(self) -> MetricEntry:
        """The mean of the epoch's readings; a split too short for one takes one now."""
        if not self._readings and self._baseline is not None:
            percent = self._reading()
            if percent is not None:
                self._record(percent)
        return super().compute()

    def clear(self) -> None:
        """Start a new epoch with a fresh baseline."""
        super().clear()
        self._baseline = None

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch's mean; the next batch takes a new baseline."""
        super().load_state_dict(state)
        self._baseline = None

    def __repr__(self) -> str:
        return "CpuUse()"


class CpuMemory(_SystemMetric):
    """``CPU Memory``: the host's used RAM in GB (1e9 bytes), total minus available.

    ``reader`` returns ``(used, total)`` bytes (default: ``/proc/meminfo``, or ``psutil``).
    """

    metric_name = "CPU Memory"
    unit = "GB"

    def __init__(
        self,
        reader: MemoryReader | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.2,
    ) -> None:
        super().__init__(clock, interval)
        self._reader = reader if reader is not None else default_memory_reader()

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        """Take a reading if ``interval`` has passed since the last one."""
        if self._reader is None or not self._due():
            return self._not_available()
        try:
            used, total = self._reader()
        except OSError:  # a transient /proc read failure must not stop training
            return self._not_available()
        entry = self._record(used / 1e9)
        return MetricEntry(
            self.name,
            lambda: f"RAM Used: {used / 1e9:.2f} / {total / 1e9:.2f} GB",
            entry.serialized,
        )

    def __repr__(self) -> str:
        return "CpuMemory()"
