"""FullyShardedDataParallel against DistributedDataParallel: per-rank memory and throughput.

The medium MLP (784-256-256-10, Adam) of ``benchmarks/ddp.py`` trains with a global batch of
128 over 2 gloo processes (``ember.distributed.spawn``), once under ember's
``DistributedDataParallel`` and once under ``FullyShardedDataParallel`` (every Linear its own
unit). After training and one more backward pass, each rank counts the bytes it holds for
the parameters, their gradients and Adam's state (a DTensor counts its local shard): FSDP's
should be about 1/world of DDP's, which holds all of them on every rank. Throughput is
measured inside the processes from a barrier to the end of training (start-up not counted),
alternating FSDP and DDP runs; medians of the pairs' ratios. Every process uses one intra-op thread.

On a machine with fewer free cores than processes both figures measure contention too; FSDP's
extra collectives (an all-gather per unit in forward and backward, a reduce-scatter per unit)
cost more than DDP's one all-reduce on a small model: FSDP is for models that do not fit.

    python benchmarks/fsdp.py [--quick] [--gpus N]     # --gpus: N processes, nccl, cuda:rank
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
from torch.distributed.tensor import DTensor

from ddp import MODELS, Mlp, dataset  # the DDP benchmark's communication-bound model and data
from ember.data import DataLoaderBuilder, InMemDataset
from ember.distributed import spawn
from ember.train import (
    CliMetricsRenderer,
    DistributedDataParallel,
    FullyShardedDataParallel,
    Learner,
    LossMetric,
    SupervisedTraining,
)
from learner_overhead import stack_batcher

WIDTH, BATCH, BATCHES, _ = MODELS["communication-bound"]
ITEMS = BATCH * BATCHES


def local_bytes(tensor: torch.Tensor | None) -> int:
    """The bytes this rank holds for ``tensor`` (a DTensor's local shard)."""
    if tensor is None:
        return 0
    if isinstance(tensor, DTensor):
        tensor = tensor.to_local()
    return tensor.numel() * tensor.element_size()


def held_bytes(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[int, int, int]:
    """This rank's bytes of parameters, gradients and optimizer state."""
    params = list(model.parameters())
    state = sum(
        local_bytes(value)
        for per_param in optimizer.state.values()
        for value in per_param.values()
        if isinstance(value, torch.Tensor) and value.dim() > 0  # not Adam's scalar step
    )
    return (
        sum(local_bytes(p) for p in params),
        sum(local_bytes(p.grad) for p in params),
        state,
    )


def train(directory: Path, epochs: int, kind: str) -> tuple[float, tuple[int, int, int]]:
    """Seconds to train ``epochs`` epochs under ``kind`` (fsdp or ddp), and the bytes held."""
    torch.manual_seed(0)
    model = Mlp(WIDTH)
    data = dataset(ITEMS)
    train = DataLoaderBuilder(stack_batcher).batch_size(BATCH).shuffle(1).build(data)
    valid = (
        DataLoaderBuilder(stack_batcher)
        .batch_size(BATCH)
        .build(InMemDataset([data[i] for i in range(BATCH)]))
    )
    strategy = (
        FullyShardedDataParallel(shard=nn.Linear) if kind == "fsdp" else DistributedDataParallel()
    )
    builder = (
        SupervisedTraining(directory, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metric_train_numeric(LossMetric())
        .with_application_logger(None)
        .num_epochs(epochs)
        .with_training_strategy(strategy)
    )
    learner = Learner(model, torch.optim.Adam, 1e-3)
    dist.barrier()
    start = time.perf_counter()
    result = builder.launch(learner)
    dist.barrier()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    if result.error is not None:
        raise RuntimeError(result.traceback)
    device = next(result.model.parameters()).device
    x, y = stack_batcher([data[i] for i in range(BATCH // dist.get_world_size())], device)
    F.cross_entropy(result.model(x.to(device)), y.to(device)).backward()  # one more step's grads
    return elapsed, held_bytes(result.model, learner.optimizer)


def _worker(out: str, epochs: int, kind: str) -> None:
    """One rank: a warm-up epoch, then the measured run; rank 0 writes seconds and bytes."""
    torch.set_num_threads(1)
    for run_epochs in (1, epochs):
        with tempfile.TemporaryDirectory() as directory:
            seconds, held = train(Path(directory), run_epochs, kind)
    device = (
        torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    )
    per_rank = torch.tensor(held, dtype=torch.int64, device=device)
    ranks = [torch.empty_like(per_rank) for _ in range(dist.get_world_size())]
    dist.all_gather(ranks, per_rank)
    if dist.get_rank() == 0:
        record = {"seconds": seconds, "bytes": [r.tolist() for r in ranks]}
        Path(out).write_text(json.dumps(record), encoding="utf-8")


def measure(kind: str, epochs: int, processes: int, backend: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "result.json"
        spawn(_worker, processes, str(out), epochs, kind, backend=backend, join_timeout=600)
        record: dict[str, object] = json.loads(out.read_text(encoding="utf-8"))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs and repeats")
    parser.add_argument("--gpus", type=int, default=0, help="N processes on N GPUs (nccl)")
    options = parser.parse_args()
    epochs, repeats = (2, 1) if options.quick else (4, 3)
    processes, backend = (options.gpus, "nccl") if options.gpus else (2, "gloo")
    load = os.getloadavg()[0]
    ratios: list[float] = []
    rates: dict[str, list[float]] = {"fsdp": [], "ddp": []}
    held: dict[str, list[list[int]]] = {}
    for _ in range(repeats):
        pair = {kind: measure(kind, epochs, processes, backend) for kind in ("fsdp", "ddp")}
        for kind, record in pair.items():
            rates[kind].append(ITEMS * epochs / float(record["seconds"]))  # type: ignore[arg-type]
            held[kind] = record["bytes"]  # type: ignore[assignment]
        ratios.append(rates["fsdp"][-1] / rates["ddp"][-1])
    print(
        f"medium MLP 784-256-256-10, Adam, global batch {BATCH}, {ITEMS} items x {epochs} "
        f"epochs, {processes} {backend} processes, 1 thread each, {os.cpu_count()} cores, median "
        f"of {repeats}; load average {load:.1f} before, {os.getloadavg()[0]:.1f} after"
    )
    for kind in ("ddp", "fsdp"):
        for rank, (params, grads, state) in enumerate(held[kind]):
            total = params + grads + state
            unsharded = sum(held["ddp"][rank])
            print(
                f"{kind:4} rank {rank}: params {params / 2**20:6.3f} MiB  grads "
                f"{grads / 2**20:6.3f} MiB  Adam state {state / 2**20:6.3f} MiB  total "
                f"{total / 2**20:6.3f} MiB = {total / unsharded:.2f}x unsharded"
            )
    print(
        f"throughput: FSDP {statistics.median(rates['fsdp']):8.0f} samples/s   DDP "
        f"{statistics.median(rates['ddp']):8.0f} samples/s   FSDP / DDP "
        f"{statistics.median(ratios):.2f}x"
    )


if __name__ == "__main__":
    main()
