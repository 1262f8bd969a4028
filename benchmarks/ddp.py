"""DistributedDataParallel: 2 gloo processes against 1 on the medium MLP (targets: docs/design.md).

The medium MLP (784-256-256-10, Adam) trains on synthetic data with a global batch of 128: in
one process (the Learner on one device), and in 2 processes started by
``ember.distributed.spawn`` (each with 64 items per step, gradients all-reduced over gloo). For
reference the same pair runs as raw PyTorch loops (one process, and
``torch.nn.parallel.DistributedDataParallel`` over 2 processes). Every process uses one intra-op
thread (``torch.set_num_threads(1)``); the time is measured inside the processes from a barrier
to the end of training, so process start-up is not counted. Medians over the repeats.

On a machine with fewer free cores than processes the 2-process figures measure contention,
not scaling: the report prints the core count next to the ratios.

    python benchmarks/ddp.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.distributed import spawn
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LossMetric,
    SupervisedTraining,
)
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from learner_overhead import MediumMlp, stack_batcher  # the same model as the overhead benchmark

BATCH = 128
ITEMS = BATCH * 40


def dataset() -> InMemDataset[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(ITEMS, 784, generator=generator)
    y = torch.randint(0, 10, (ITEMS,), generator=generator)
    return InMemDataset(list(zip(x.unbind(), y.unbind(), strict=True)))


def learner_run(directory: Path, epochs: int, ddp: bool) -> float:
    """Seconds the Learner takes to train ``epochs`` epochs (validation on one batch)."""
    torch.manual_seed(0)
    model = MediumMlp()
    data = dataset()
    train = DataLoaderBuilder(stack_batcher).batch_size(BATCH).shuffle(1).build(data)
    valid = (
        DataLoaderBuilder(stack_batcher)
        .batch_size(BATCH)
        .build(InMemDataset([data[i] for i in range(BATCH)]))
    )
    builder = (
        SupervisedTraining(directory, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metric_train_numeric(LossMetric())
        .with_application_logger(None)
        .num_epochs(epochs)
    )
    if ddp:
        builder = builder.with_training_strategy(DistributedDataParallel())
        dist.barrier()
    start = time.perf_counter()
    result = builder.launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-3))
    if ddp:
        dist.barrier()
    elapsed = time.perf_counter() - start
    if result.error is not None:
        raise RuntimeError(result.traceback)
    return elapsed


def raw_run(epochs: int, ddp: bool) -> float:
    """Seconds a raw loop (torch's DDP with ``ddp``) takes over the same batches."""
    torch.manual_seed(0)
    model: nn.Module = MediumMlp()
    rank, world = (dist.get_rank(), dist.get_world_size()) if ddp else (0, 1)
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loader = DataLoaderBuilder(stack_batcher).batch_size(BATCH).shuffle(1).build(dataset())
    share = BATCH // world
    if ddp:
        dist.barrier()
    start = time.perf_counter()
    for _ in range(epochs):
        losses = []
        for x, y in loader:
            x, y = x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share]
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        torch.stack(losses).tolist()
    if ddp:
        dist.barrier()
    return time.perf_counter() - start


def timed(kind: str, epochs: int, ddp: bool) -> float:
    """Seconds of one run of ``kind`` (learner or raw), after a one-epoch warm-up run (the
    first run in a process pays one-time costs: lazy imports, allocator, thread start-up)."""
    torch.set_num_threads(1)
    seconds = 0.0
    for run_epochs in (1, epochs):
        with tempfile.TemporaryDirectory() as directory:
            seconds = (
                learner_run(Path(directory), run_epochs, ddp)
                if kind == "learner"
                else raw_run(run_epochs, ddp)
            )
    return seconds


def _ddp_worker(out: str, epochs: int, kind: str) -> None:
    """One rank of a 2-process measurement; rank 0 writes the seconds to ``out``."""
    seconds = timed(kind, epochs, ddp=True)
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(seconds), encoding="utf-8")


def measure(kind: str, processes: int, epochs: int) -> float:
    """Samples per second of one run of ``kind`` (learner or raw) on ``processes``."""
    if processes == 1:
        seconds = timed(kind, epochs, ddp=False)
    else:
        with tempfile.TemporaryDirectory() as directory:
            out = Path(directory) / "seconds.json"
            spawn(_ddp_worker, processes, str(out), epochs, kind, join_timeout=600)
            seconds = json.loads(out.read_text(encoding="utf-8"))
    return ITEMS * epochs / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs and repeats")
    options = parser.parse_args()
    epochs, repeats = (2, 1) if options.quick else (5, 3)
    runs: dict[tuple[str, int], list[float]] = {}
    for _ in range(repeats):
        for kind in ("learner", "raw"):
            for processes in (1, 2):
                runs.setdefault((kind, processes), []).append(measure(kind, processes, epochs))
    rate = {key: statistics.median(values) for key, values in runs.items()}
    print(
        f"medium MLP 784-256-256-10, global batch {BATCH}, {ITEMS} items x {epochs} epochs, "
        f"1 thread per process, {os.cpu_count()} cores, median of {repeats}"
    )
    for kind, label in (("learner", "ember Learner"), ("raw", "raw PyTorch loop")):
        one, two = rate[(kind, 1)], rate[(kind, 2)]
        print(
            f"{label:18} 1 process {one:8.0f} samples/s   2 processes (gloo) {two:8.0f} "
            f"samples/s   ratio {two / one:.2f}x"
        )
    print(
        "ember DDP / torch DDP: "
        f"{rate[('learner', 2)] / rate[('raw', 2)]:.2f}x   "
        f"(ember single / raw single: {rate[('learner', 1)] / rate[('raw', 1)]:.2f}x)"
    )


if __name__ == "__main__":
    main()
