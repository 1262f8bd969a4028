"""Learner overhead against a raw PyTorch loop doing the same work (targets: docs/design.md).

Both loops train the same model from the same weights on batches from identical ember loaders,
with the same optimizer, and validate every epoch; the raw loop reads the loss once per epoch,
the Learner logs every batch's loss through its metrics thread, to the default metric files and,
as a second variant, to memory: the seed workload writes ~600 epoch files a second, and this
disk's speed at that is printed too. One intra-op thread (``torch.set_num_threads(1)``), runs
alternated, medians reported. Not a test: it prints.

    python benchmarks/learner_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.app.demo import Batch, Mlp, make_samples, sample_batcher
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    ClassificationOutput,
    CliMetricsRenderer,
    InMemoryMetricLogger,
    Learner,
    LearnerModel,
    LossMetric,
    SupervisedTraining,
    TrainOutput,
)


class MediumMlp(LearnerModel):
    """784-256-256-10 classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def classify(self, batch: tuple[torch.Tensor, torch.Tensor]) -> ClassificationOutput:
        x, y = batch
        logits = self(x)
        return ClassificationOutput(F.cross_entropy(logits, y), logits, y)

    def train_step(
        self, batch: tuple[torch.Tensor, torch.Tensor]
    ) -> TrainOutput[ClassificationOutput]:
        out = self.classify(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> ClassificationOutput:
        return self.classify(batch)


def stack_batcher(
    items: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


def raw_loop(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, object], torch.Tensor],
    train: DataLoader[object],
    valid: DataLoader[object],
    epochs: int,
) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        total = torch.zeros(())
        for batch in train:
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.detach()
        model.eval()
        with torch.inference_mode():
            for batch in valid:
                total += loss_fn(model, batch)
        total.item()  # the raw loop reads the loss once per epoch
    return time.perf_counter() - start


# Run directories are kept until the benchmark ends: deleting hundreds of epoch directories
# between runs (ext4 with online discard here) slows the file creation of the next runs, which
# is the benchmark's doing, not the Learner's.
RUNS = tempfile.TemporaryDirectory(prefix="ember-bench-")

Workload = Callable[
    [],
    tuple[
        nn.Module,
        Callable[[nn.Module, object], torch.Tensor],
        DataLoader[object],
        DataLoader[object],
    ],
]


def learner_run(
    model: nn.Module,
    train: DataLoader[object],
    valid: DataLoader[object],
    epochs: int,
    *,
    in_memory: bool,
) -> float:
    builder = (
        SupervisedTraining(Path(tempfile.mkdtemp(dir=RUNS.name)), train, valid)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(epochs)
        .renderer(CliMetricsRenderer(io.StringIO()))
    )
    if in_memory:
        builder = builder.with_metric_logger(InMemoryMetricLogger()).without_file_logs()
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3), 1e-3)
    return timed_launch(builder, learner)


def timed_launch(builder: SupervisedTraining, learner: Learner[Any]) -> float:
    """Seconds from ``launch`` to its return (the run's error raised, never timed as a run)."""
    start = time.perf_counter()
    result = builder.launch(learner)
    elapsed = time.perf_counter() - start
    if result.error is not None:
        raise result.error
    return elapsed


def compare(name: str, make: Workload, epochs: int, repeats: int) -> None:
    """Raw loop, Learner with the default file logger, Learner logging to memory: alternated."""
    times: dict[str, list[float]] = {"raw": [], "files": [], "memory": []}
    steps = 0
    for _ in range(repeats):
        model, loss_fn, train, valid = make()
        steps = len(train) * epochs
        times["raw"].append(raw_loop(model, loss_fn, train, valid, epochs))
        for variant in ("files", "memory"):
            model, _, train, valid = make()
            times[variant].append(
                learner_run(model, train, valid, epochs, in_memory=variant == "memory")
            )
    raw = statistics.median(times["raw"])
    print(f"{name}: raw loop {raw * 1e6 / steps:.0f} µs/step (medians of {repeats}, {steps} steps)")
    for variant, label in (("files", "metric files (default)"), ("memory", "metrics in memory")):
        learner = statistics.median(times[variant])
        pairs = sorted(b / a for a, b in zip(times["raw"], times[variant], strict=True))
        print(
            f"  learner, {label}: {learner * 1e6 / steps:.0f} µs/step, ratio {learner / raw:.3f}x, "
            f"overhead {(learner - raw) * 1e6 / steps:+.1f} µs/step "
            f"(ratios of the pairs {pairs[0]:.3f}-{pairs[-1]:.3f})"
        )


def disk_probe(files: int = 200) -> float:
    """Median µs to make an epoch directory and write a small file in it, where runs go.

    The seed workload makes ~600 of each a second; this disk's speed at that varies tenfold
    over minutes here, and the file-logger figure with it.
    """
    base = tempfile.mkdtemp(dir=RUNS.name)
    times = []
    for index in range(files):
        start = time.perf_counter()
        directory = os.path.join(base, f"epoch-{index}")
        os.mkdir(directory)
        fd = os.open(os.path.join(directory, "Loss.log"), os.O_WRONLY | os.O_CREAT, 0o666)
        os.write(fd, b"0.5,1\n" * 8)
        os.close(fd)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def seed_workload() -> tuple[
    nn.Module, Callable[[nn.Module, object], torch.Tensor], DataLoader[object], DataLoader[object]
]:
    torch.manual_seed(0)
    builder = DataLoaderBuilder(sample_batcher).batch_size(32)
    train = builder.build(InMemDataset(make_samples(200, seed=1)))
    valid = builder.build(InMemDataset(make_samples(64, seed=2)))

    def loss_fn(model: nn.Module, batch: object) -> torch.Tensor:
        assert isinstance(model, Mlp) and isinstance(batch, Batch)
        return model.regression(batch).loss

    return Mlp(), loss_fn, train, valid  # type: ignore[return-value]


def medium_workload() -> tuple[
    nn.Module, Callable[[nn.Module, object], torch.Tensor], DataLoader[object], DataLoader[object]
]:
    torch.manual_seed(0)
    x, y = torch.randn(20_000, 784), torch.randint(0, 10, (20_000,))
    items = list(zip(x, y, strict=True))
    builder = DataLoaderBuilder(stack_batcher).batch_size(128)
    train = builder.build(InMemDataset(items[:18_000]))
    valid = builder.build(InMemDataset(items[18_000:]))

    def loss_fn(model: nn.Module, batch: object) -> torch.Tensor:
        assert isinstance(model, MediumMlp)
        return model.classify(batch).loss  # type: ignore[arg-type]

    return MediumMlp(), loss_fn, train, valid  # type: ignore[return-value]


def import_cost() -> None:
    def measure(code: str) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    torch_only, with_ember = measure("import torch"), measure("import torch, ember")
    print(
        f"import: torch {torch_only:.3f} s, torch+ember {with_ember:.3f} s, "
        f"ember adds {with_ember - torch_only:+.3f} s (medians of 5 fresh interpreters)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs and repeats")
    args = parser.parse_args()
    torch.set_num_threads(1)
    quick = args.quick
    before = disk_probe()
    compare("seed workload (97-param MLP)", seed_workload, 30 if quick else 300, 3 if quick else 5)
    compare("MLP 784-256-256-10, batch 128", medium_workload, 1 if quick else 2, 3 if quick else 7)
    print(
        f"disk: {before:.0f} µs before, {disk_probe():.0f} µs after per epoch directory and "
        "file (median of 200; ~40 µs when this disk is quiet)"
    )
    import_cost()


if __name__ == "__main__":
    main()
