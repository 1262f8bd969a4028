"""Shared pieces for the training tests: a tiny regression model and its loaders."""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.extend import NumericEntry, Split, SupervisedLearningStrategy
from ember.train import (
    CliMetricsRenderer,
    InMemoryMetricLogger,
    Interrupter,
    Learner,
    LearnerModel,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)
from ember.train._config import TrainingConfig
from ember.train._counters import RunCounters
from ember.train._logger import blocks
from ember.train._logger.store import EventStore
from ember.train._loop import LoopOutcome, TrainingLoop
from ember.train._metric.values import MetricValue
from ember.train._plan import RunPlan, plan_run


@dataclass(frozen=True)
class Batch:
    x: torch.Tensor
    y: torch.Tensor


def batcher(items: list[tuple[list[float], float]], device: torch.device) -> Batch:
    x = torch.tensor([item[0] for item in items], dtype=torch.float32, device=device)
    y = torch.tensor([[item[1]] for item in items], dtype=torch.float32, device=device)
    return Batch(x, y)


def samples(count: int, seed: int = 0) -> list[tuple[list[float], float]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 3, generator=generator)
    y = x.sum(dim=1)
    return [(row, target) for row, target in zip(x.tolist(), y.tolist(), strict=True)]


def loader(
    count: int, batch_size: int = 4, *, shuffle: int | None = None, workers: int = 0, seed: int = 0
) -> DataLoader[Batch]:
    builder = DataLoaderBuilder(batcher).batch_size(batch_size).num_workers(workers)
    if shuffle is not None:
        builder = builder.shuffle(shuffle)
    return builder.build(InMemDataset(samples(count, seed)))


class TinyRegressor(LearnerModel):
    """``Linear(3, 1)`` (or ``layer``, any module of 3 inputs and 1 output) with MSE; hooks let a
    test see or break each step."""

    def __init__(self, layer: nn.Module | None = None) -> None:
        super().__init__()
        self.linear: nn.Module = nn.Linear(3, 1) if layer is None else layer
        self.on_train_step: Callable[[Batch], None] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x)
        return out

    def regression(self, batch: Batch) -> RegressionOutput:
        out = self(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y), out, batch.y)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        if self.on_train_step is not None:
            self.on_train_step(batch)
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        return self.regression(batch)


def quiet(directory: Path, train: Any, valid: Any) -> SupervisedTraining:
    """A run whose renderer prints to a buffer nobody reads (the tests read the files)."""
    return SupervisedTraining(directory, train, valid).renderer(CliMetricsRenderer(io.StringIO()))


def read_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


class SpyProcessor:
    """An event processor that records every event with its split, in order."""

    error: BaseException | None = None

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def process_train(self, event: Any) -> None:
        self.events.append(("train", event))

    def process_valid(self, event: Any) -> None:
        self.events.append(("valid", event))

    def flush(self) -> None:
        self.events.append(("flush", None))


def run_loop(
    strategy: SupervisedLearningStrategy,
    learner: Learner[Any],
    train: DataLoader[Any],
    valid: DataLoader[Any],
    processor: Any,
    epochs: int,
    interrupter: Interrupter | None = None,
    **given: Any,
) -> LoopOutcome:
    """The training loop alone (no session): ``strategy`` on the loaders, events to
    ``processor``. ``given`` holds configuration fields (``grads_accumulation``) and, to put a
    part in by hand, plan fields (``schedule``, ``checkpointer``, ``mid_round_blocker``)."""
    plan_fields = {f.name for f in dataclasses.fields(RunPlan)}
    config = TrainingConfig(
        Path("unused"),
        train,
        valid,
        num_epochs=epochs,
        strategy=strategy,
        interrupter=interrupter or Interrupter(),
        **{key: value for key, value in given.items() if key not in plan_fields},
    )
    plan = dataclasses.replace(
        plan_run(config, learner),
        **{key: value for key, value in given.items() if key in plan_fields},
    )
    run = strategy.start(learner.model, {"train": train, "valid": valid})
    learner.bind()
    try:
        counters = RunCounters()
        store = EventStore([InMemoryMetricLogger()])
        return TrainingLoop(plan, learner, run, counters, processor, store).execute()
    finally:
        run.close()


def weight(model: nn.Module) -> torch.Tensor:
    """The ``linear.weight`` of a TinyRegressor (typed, for comparisons)."""
    return model.get_parameter("linear.weight")


def bias(model: nn.Module) -> torch.Tensor:
    """The ``linear.bias`` of a TinyRegressor."""
    return model.get_parameter("linear.bias")


def metric_value(
    name: str, entry: NumericEntry, epoch: int = 1, split: Split = Split.TRAIN, step: int = 0
) -> MetricValue:
    """The value a logger receives for ``entry`` (its text as a metric writes it)."""
    return MetricValue(
        name, split, epoch, step, entry.value, entry.weight, entry.final, entry.serialize()
    )


EMBER_THREADS = (
    "train-worker",
    "metric-writer",
    "checkpoint-writer",
    "dataloader-",
    "train-device-",
)


def ember_threads(since: Collection[threading.Thread] = ()) -> list[str]:
    """The names of ember's threads alive now but not in ``since`` (none may outlive
    ``launch``; ``since``: the threads before it, which another test may have left), and of
    its metric-writer processes (``metric-writer process PID``: none may outlive it either)."""
    threads = [
        t.name for t in threading.enumerate() if t.name.startswith(EMBER_THREADS) and t not in since
    ]
    return threads + [f"metric-writer process {pid}" for pid in metric_writer_processes()]


def metric_writer_processes() -> list[int]:
    """The pids of this process's children that run ember's metric-writer (Linux: read from
    /proc; [] where there is no /proc)."""
    pids = []
    for children in Path("/proc/self/task").glob("*/children"):
        pids += [int(pid) for pid in children.read_text().split()]
    writers = []
    for pid in pids:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if command.split(b"\0")[-2:-1] == [os.fsencode(blocks.__file__)]:
            writers.append(pid)
    return writers


@contextmanager
def read_only_directory(path: Path) -> Iterator[Path]:
    """``path`` as a directory nothing can be written to: mode 0o555, or as root (who ignores
    modes) a read-only tmpfs mounted there; skips the test when neither is possible."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mount.returncode != 0:
        pytest.skip(f"as root a read-only directory needs a tmpfs mount, refused: {mount.stderr}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=False)
