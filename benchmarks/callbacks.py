"""What callbacks cost per step, against a raw PyTorch loop doing the same work.

The seed workload (the demo's 97-parameter MLP, batches of 32, a short epoch of 7 steps) is the
smallest step ember trains, so a fixed cost per step shows most there. Alternated runs, medians
of the pairs' ratios, one intra-op thread, metrics in memory (the file writes are measured by
``event_floor.py``):

* raw: a hand loop over the same loader;
* ember: the Learner with no callback;
* ember + Callback(): a callback with no per-step method (its run-level points only): the loop
  resolves no per-step method and calls nothing per step;
* ember + no-op per step: a callback with the four per-step points, each doing nothing;
* ember + EMA(0.99): the moving average of the weights after every step.

    python benchmarks/callbacks.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from ember.app.demo import Mlp, make_samples, sample_batcher
from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import (
    EMA,
    Callback,
    CliMetricsRenderer,
    InMemoryMetricLogger,
    Learner,
    LossMetric,
    RunView,
    SupervisedTraining,
)
from learner_overhead import timed_launch

RUNS = tempfile.TemporaryDirectory(prefix="ember-bench-callbacks-")


class PerStep(Callback):
    """The four per-step points, doing nothing."""

    def on_train_batch_start(self, step: RunView) -> None:
        pass

    def on_before_optimizer_step(self, step: RunView) -> None:
        pass

    def on_after_optimizer_step(self, step: RunView) -> None:
        pass

    def on_train_batch_end(self, step: RunView) -> None:
        pass


def loader() -> object:
    return (
        DataLoaderBuilder(sample_batcher).batch_size(32).build(InMemDataset(make_samples(200, 0)))
    )


def raw(epochs: int) -> float:
    torch.manual_seed(0)
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    train = loader()
    start = time.perf_counter()
    for _ in range(epochs):
        total = torch.zeros(())
        for batch in train:  # type: ignore[attr-defined]
            loss = F.mse_loss(model(batch.x), batch.y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.detach()
        total.item()
    return time.perf_counter() - start


def ember(epochs: int, *callbacks: Callback) -> float:
    torch.manual_seed(0)
    model = Mlp()
    training = (
        SupervisedTraining(Path(tempfile.mkdtemp(dir=RUNS.name)), loader())  # type: ignore[arg-type]
        .metric_train_numeric(LossMetric())
        .num_epochs(epochs)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_metric_logger(InMemoryMetricLogger())
        .without_file_logs()
        .with_application_logger(None)
    )
    if callbacks:
        training = training.with_callbacks(*callbacks)
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-2), 1e-2)
    return timed_launch(training, learner)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs and pairs")
    args = parser.parse_args()
    torch.set_num_threads(1)
    epochs, repeats = (60, 7) if args.quick else (200, 15)
    steps = epochs * 7
    with open("/proc/loadavg") as file:
        print(f"start: load average {' '.join(file.read().split()[:3])} ({os.cpu_count()} CPUs)")
    contenders: dict[str, Callable[[], float]] = {
        "raw": lambda: raw(epochs),
        "ember": lambda: ember(epochs),
        "ember + Callback()": lambda: ember(epochs, Callback()),
        "ember + no-op per step": lambda: ember(epochs, PerStep()),
        "ember + EMA(0.99)": lambda: ember(epochs, EMA(0.99)),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, run in contenders.items():
            times[name].append(run())
    base = statistics.median(times["raw"])
    print(f"raw loop: {base * 1e6 / steps:.0f} µs/step ({steps} steps, medians of {repeats})")
    for name in list(contenders)[1:]:
        ratios = sorted(b / a for a, b in zip(times["raw"], times[name], strict=True))
        extra = sorted(
            (b - a) * 1e6 / steps for a, b in zip(times["ember"], times[name], strict=True)
        )
        line = (
            f"{name}: {statistics.median(ratios):.3f}x raw (pairs {ratios[0]:.3f}-{ratios[-1]:.3f})"
        )
        if name != "ember":
            line += f", {statistics.median(extra):+.1f} µs/step over ember"
        print(line)
    with open("/proc/loadavg") as file:
        print(f"end: load average {' '.join(file.read().split()[:3])}")


if __name__ == "__main__":
    main()
