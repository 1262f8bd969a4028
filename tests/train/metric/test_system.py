"""CpuUse, CpuMemory and CudaMetric: injected readers and clocks, /proc parsing, no CUDA here."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from ember.data import Progress
from ember.extend import MetricMetadata
from ember.train import CpuMemory, CpuUse, CudaMetric, Numeric
from ember.train._metric.cpu import (
    default_cpu_times_reader,
    default_memory_reader,
    read_proc_meminfo,
    read_proc_stat,
)
from ember.train._metric.cuda import GpuReading

META = MetricMetadata(Progress(1, 1), 1, None)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTimes:
    """Cumulative (idle, total) counters that advance by a given busy share on each read."""

    def __init__(self, busy_shares: list[float]) -> None:
        self.shares = list(busy_shares)
        self.idle = self.total = 0.0
        self.reads = 0

    def __call__(self) -> tuple[float, float]:
        self.reads += 1
        if self.reads > 1:
            share = self.shares.pop(0)
            self.idle += 100 * (1 - share)
            self.total += 100
        return self.idle, self.total


def _serialized(
    metric: CpuUse | CpuMemory | CudaMetric, clock: FakeClock, times: list[float]
) -> list[str]:
    lines = []
    for t in times:
        clock.now = t
        lines.append(metric.update(object(), META).serialized)
    return lines


def test_cpu_use_reads_at_most_every_interval_and_averages_readings_once() -> None:
    """First batch: the baseline; then readings >= 200 ms apart, each counted once in the mean."""
    clock, reader = FakeClock(), FakeTimes([0.5, 0.25])
    metric = CpuUse(reader, clock=clock)
    lines = _serialized(metric, clock, [0.0, 0.1, 0.2, 0.3, 0.45])
    assert lines == ["N/A", "N/A", "50,1", "N/A", "25,1"]
    assert reader.reads == 3
    assert metric.compute().serialized == "37.5,final"  # (50 + 25) / 2, the last not repeated
    assert isinstance(metric, Numeric) and metric.name == "CPU Usage"
    assert metric.attributes.unit == "%" and not metric.attributes.higher_is_better


def test_cpu_use_of_a_short_split_reads_once_at_the_end() -> None:
    """A split shorter than the interval still gets one reading, at compute()."""
    clock, reader = FakeClock(), FakeTimes([0.75])
    metric = CpuUse(reader, clock=clock)
    assert _serialized(metric, clock, [0.0, 0.05]) == ["N/A", "N/A"]
    assert metric.compute().serialized == "75,final"


def test_cpu_use_takes_a_new_baseline_each_split() -> None:
    """After clear() the first batch of the next split only takes the baseline again."""
    clock, reader = FakeClock(), FakeTimes([1.0, 0.0, 0.2])
    metric = CpuUse(reader, clock=clock)
    _serialized(metric, clock, [0.0, 0.3])
    metric.compute()
    metric.clear()
    assert _serialized(metric, clock, [10.0, 10.3]) == ["N/A", "20,1"]


def test_cpu_use_survives_a_failing_reader() -> None:
    """A reader raising OSError gives N/A entries, never an exception."""

    def broken() -> tuple[float, float]:
        raise OSError("gone")

    clock = FakeClock()
    metric = CpuUse(broken, clock=clock)
    assert _serialized(metric, clock, [0.0, 0.5]) == ["N/A", "N/A"]
    metric.compute()
    assert math.isnan(metric.final_value().value)


def test_cpu_memory_reports_used_gigabytes() -> None:
    """Used bytes / 1e9 per reading; the formatted text shows used and total."""
    clock = FakeClock()
    readings = iter([(2e9, 8e9), (4e9, 8e9)])
    metric = CpuMemory(lambda: next(readings), clock=clock)
    entries = []
    for t in (0.0, 0.1, 0.25):
        clock.now = t
        entries.append(metric.update(object(), META))
    assert [e.serialized for e in entries] == ["2,1", "N/A", "4,1"]
    assert entries[0].formatted == "RAM Used: 2.00 / 8.00 GB"
    assert metric.compute().serialized == "3,final"
    assert metric.name == "CPU Memory" and metric.attributes.unit == "GB"


def test_proc_files_are_parsed(tmp_path: Path) -> None:
    """/proc/stat's cpu line gives (idle + iowait, total); /proc/meminfo total minus available."""
    stat = tmp_path / "stat"
    stat.write_text("cpu  10 1 5 80 4 0 0 0 3 0\ncpu0 10 1 5 80 4 0 0 0 3 0\n")
    assert read_proc_stat(stat) == (84.0, 100.0)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       1000 kB\nMemFree:  100 kB\nMemAvailable:   250 kB\n")
    assert read_proc_meminfo(meminfo) == (750 * 1024, 1000 * 1024)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")
def test_default_readers_read_proc_on_linux() -> None:
    """On Linux the defaults read /proc (not psutil), and give sensible numbers."""
    assert default_cpu_times_reader() is read_proc_stat
    assert default_memory_reader() is read_proc_meminfo
    idle, total = read_proc_stat()
    assert 0 <= idle <= total
    memory = CpuMemory()
    memory.update(object(), META)
    value = memory.value()
    assert value is not None and value.value > 0


def test_cuda_says_unavailable_without_initialising_cuda() -> None:
    """On a machine without a GPU: an 'unavailable' entry, no error, CUDA left uninitialised."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    metric = CudaMetric()
    entry = metric.update(object(), META)
    assert (entry.formatted, entry.serialized) == ("unavailable", "unavailable")
    assert metric.compute().serialized == "unavailable"
    assert not torch.cuda.is_initialized()  # type: ignore[no-untyped-call]  # unannotated
    assert not isinstance(metric, Numeric) and metric.name == "Cuda"


def test_cuda_formats_readings_and_logs_only_changes() -> None:
    """Each GPU's memory, use and power; a line only when the text changes; errors never raise."""
    clock = FakeClock()
    states: list[object] = [
        [GpuReading(0, 2_500_000_000, 80_000_000_000, 45, 120.25)],
        [GpuReading(0, 2_500_000_000, 80_000_000_000, 45, 120.25)],
        [GpuReading(0, 3_000_000_000, 80_000_000_000)],
        RuntimeError("driver gone"),
        [],
    ]

    def reader() -> list[GpuReading] | None:
        state = states.pop(0)
        if isinstance(state, Exception):
            raise state
        return state  # type: ignore[return-value]

    metric = CudaMetric(reader, clock=clock)
    lines = _serialized(metric, clock, [0.0, 0.3, 0.6, 0.9, 1.2])
    assert lines == [
        "GPU #0 - Memory 2.50/80.00 GB - Usage 45% - Power 120.2 W",
        "N/A",
        "GPU #0 - Memory 3.00/80.00 GB",
        "unavailable (RuntimeError: driver gone)",
        "CUDA not in use by this process",
    ]
