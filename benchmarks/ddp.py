"""DistributedDataParallel: ember's against torch's own, 2 gloo processes (issues 15 and 30).

Three models, each trained by 2 processes started by ``ember.distributed.spawn``:

- **communication-bound**: the medium MLP (784-256-256-10, Adam, global batch 128; 1 MiB of
  gradients against a few ms of compute per step), target ember >= 0.95x torch;
- **compute-dominated**: a wide MLP (784-1024-1024-10, Adam, global batch 2048), target
  ember >= 0.98x torch;
- **tiny**: a ``Linear(20, 1)`` regression (the DDP tutorial's size, Adam, global batch 32): a
  step is nothing but overhead; target ember >= 0.91x torch (at most 1.10x its time).

``fresh_processes`` (used by ``benchmarks/user_loops.py``) times one run per fresh process
group instead, without warm-up: a user's script, first-run costs included.

ember is the Learner with ``DistributedDataParallel()`` (sharded loader, a Loss metric on rank
0 with its per-batch log lines, outputs reaching rank 0 in chunks, no validation); torch is a
raw loop over the same global batches with ``torch.nn.parallel.DistributedDataParallel``, each
rank reading its share of every global batch through the same ``ShardedDataLoader`` ember
uses, keeping its losses and reading them once an epoch. Same model, data, optimizer (Adam,
lr 1e-3) and steps on both sides. Both run **in the same processes, alternated** (ember,
torch, torch, ember, ...) after a warm-up run of each, so a pair sees the same machine load;
the figure is the median of the pairs' ratios. Every process uses one intra-op thread; the
time is measured inside the processes from a barrier to the end of training, and includes each
side's set-up of its engine (torch's ``DistributedDataParallel`` wrapper and optimizer; ember's
``launch``, which builds its reducer). The machine's load average is printed before and after:
on a shared machine the ratios are the figure to read, not the samples/s, and ``--control``
adds a second torch run to every pair, whose torch/torch ratio (1.000x on a quiet machine)
shows how far the machine's noise moves a pair's figure.

    python benchmarks/ddp.py [--quick] [--gpus N] [--epochs E] [--pairs P] [--control]
                             [--models communication-bound compute-dominated tiny]
                                                      # --gpus: N processes, nccl, cuda:rank
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.data._shard import ShardedDataLoader
from ember.distributed import spawn
from ember.train import (
    ClassificationOutput,
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from learner_overhead import stack_batcher

# name -> (hidden width, global batch, batches per epoch, target ratio); width 0: the ``Tiny``
# model (a Linear(20, 1) regression, the DDP tutorial's size: pure per-step overhead)
MODELS = {
    "communication-bound": (256, 128, 40, 0.95),
    "compute-dominated": (1024, 2048, 8, 0.98),
    "tiny": (0, 32, 200, 0.91),
}


class Mlp(LearnerModel):
    """784-width-width-10 classifier."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(784, width),
            nn.ReLU(),
            nn.Linear(width, width),
            nn.ReLU(),
            nn.Linear(width, 10),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def classify(self, batch: tuple[torch.Tensor, torch.Tensor]) -> ClassificationOutput:
        x, y = batch
        logits = self(x)
        return ClassificationOutput(F.cross_entropy(logits, y), logits, y)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> TrainOutput[Any]:
        out = self.classify(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> ClassificationOutput:
        return self.classify(batch)

    @staticmethod
    def criterion(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(out, y)


class Tiny(LearnerModel):
    """A Linear(20, 1) regression: the step is nothing but overhead."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Linear(20, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def regress(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        x, y = batch
        out = self(x)
        return RegressionOutput(F.mse_loss(out, y), out, y)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> TrainOutput[Any]:
        out = self.regress(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        return self.regress(batch)

    @staticmethod
    def criterion(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, y)


def make_model(width: int) -> Mlp | Tiny:
    return Mlp(width) if width else Tiny()


def dataset(items: int, tiny: bool = False) -> InMemDataset[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(items, 20 if tiny else 784, generator=generator)
    if tiny:
        y = torch.randn(items, 1, generator=generator)
    else:
        y = torch.randint(0, 10, (items,), generator=generator)
    return InMemDataset(list(zip(x.unbind(), y.unbind(), strict=True)))


def _device() -> torch.device:
    """This rank's device: ``cuda:LOCAL_RANK`` under nccl (``--gpus``), else the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _settled() -> None:
    """Before a timed run: collect the garbage of the runs before it and freeze what lives now
    (the run's dataset: thousands of tensor objects), so that no full collection lands inside
    the timing: one costs ~200 ms here, a fifth of a run, on whichever side it happens to hit.
    :func:`_unsettled` undoes the freeze after the timing."""
    gc.collect()
    gc.freeze()


def _unsettled() -> None:
    gc.unfreeze()


def _synchronized(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def ember_run(name: str, epochs: int) -> float:
    """Seconds ember's DDP takes to train ``epochs`` epochs (no validation: the raw loop has
    none)."""
    width, batch, batches, _ = MODELS[name]
    torch.manual_seed(0)
    model = make_model(width)
    train = (
        DataLoaderBuilder(stack_batcher)
        .batch_size(batch)
        .shuffle(1)
        .build(dataset(batch * batches, tiny=not width))
    )
    with tempfile.TemporaryDirectory() as directory:
        builder = (
            SupervisedTraining(Path(directory), train)
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metric_train_numeric(LossMetric())
            .with_application_logger(None)
            .num_epochs(epochs)
            .with_training_strategy(DistributedDataParallel())
        )
        _settled()
        dist.barrier()
        start = _synchronized(_device())
        result = builder.launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-3))
        dist.barrier()
        elapsed = _synchronized(_device()) - start
        _unsettled()
    if result.error is not None:
        raise RuntimeError(result.traceback)
    return elapsed


def torch_run(name: str, epochs: int) -> float:
    """Seconds a raw loop with torch's DDP takes over the same global batches."""
    width, batch, batches, _ = MODELS[name]
    torch.manual_seed(0)
    device = _device()
    plain = make_model(width).to(device)
    rank, world = dist.get_rank(), dist.get_world_size()
    # the same shares as ember's, read by the same sharded loader: only the engines differ
    loader = ShardedDataLoader(
        DataLoaderBuilder(stack_batcher)
        .batch_size(batch)
        .shuffle(1)
        .build(dataset(batch * batches, tiny=not width))
        .to_device(device),
        rank,
        world,
    )
    _settled()
    dist.barrier()
    start = _synchronized(device)
    # timed like ember's launch, which sets up its reducer and optimizer inside the timing
    model = nn.parallel.DistributedDataParallel(
        plain, device_ids=[device] if device.type == "cuda" else None
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(epochs):
        losses = []
        for x, y in loader:
            loss = plain.criterion(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        torch.stack(losses).tolist()
    dist.barrier()
    elapsed = _synchronized(device) - start
    _unsettled()
    loader.close()
    return elapsed


def _worker(out: str, name: str, epochs: int, pairs: int, control: bool) -> None:
    """One rank: a warm-up run of each, then ``pairs`` alternated pairs (ember, torch; then
    torch, ember; ...), each with a second torch run with ``control`` (the order rotates, so
    that every side runs first, second and third equally often); rank 0 writes the times."""
    torch.set_num_threads(1)
    ember_run(name, 1)
    torch_run(name, 1)
    runs = {"ember": ember_run, "torch": torch_run, "control": torch_run}
    order = ["ember", "torch", "control"] if control else ["ember", "torch"]
    times: list[dict[str, float]] = []
    for pair in range(pairs):
        shift = pair % len(order)
        sides = order[shift:] + order[:shift]
        times.append({side: runs[side](name, epochs) for side in sides})
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(times), encoding="utf-8")


def _fresh_worker(out: str, side: str, name: str, epochs: int) -> None:
    """One rank of a fresh process group running one side once, with no warm-up: what a user's
    script pays, first-run costs included; rank 0 writes its time."""
    torch.set_num_threads(1)
    elapsed = (ember_run if side == "ember" else torch_run)(name, epochs)
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(elapsed), encoding="utf-8")


def in_processes(
    name: str, epochs: int, pairs: int, *, control: bool = False, gpus: int = 0
) -> list[dict[str, float]]:
    """Each pair's seconds per side, alternated in the same ``gpus`` (or 2 gloo) processes."""
    processes, backend = (gpus, "nccl") if gpus else (2, "gloo")
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "times.json"
        spawn(
            _worker,
            processes,
            str(out),
            name,
            epochs,
            pairs,
            control,
            backend=backend,
            join_timeout=1800,
        )
        times: list[dict[str, float]] = json.loads(out.read_text(encoding="utf-8"))
    return times


def fresh_processes(name: str, epochs: int, pairs: int) -> list[dict[str, float]]:
    """Each pair's seconds per side, every run in 2 fresh gloo processes (sides alternated)."""
    times: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "time.json"
        for pair in range(pairs):
            sides = ("ember", "torch") if pair % 2 == 0 else ("torch", "ember")
            seconds = {}
            for side in sides:
                spawn(_fresh_worker, 2, str(out), side, name, epochs, join_timeout=600)
                seconds[side] = float(json.loads(out.read_text(encoding="utf-8")))
            times.append(seconds)
    return times


def _spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.3f}x (pairs {min(ratios):.3f}-{max(ratios):.3f}x)"


def throughput_line(
    name: str, times: list[dict[str, float]], epochs: int, target: float | None = None
) -> str:
    """Both sides' samples/s and the pairs' ember/torch throughput ratio, against the target
    (the model's own by default)."""
    width, batch, batches, own = MODELS[name]
    target = own if target is None else target
    items = batch * batches * epochs
    ratios = [pair["torch"] / pair["ember"] for pair in times]
    ember_rate = statistics.median(items / pair["ember"] for pair in times)
    torch_rate = statistics.median(items / pair["torch"] for pair in times)
    verdict = "met" if statistics.median(ratios) >= target else "NOT met"
    shape = f"784-{width}-{width}-10" if width else "Linear(20, 1)"
    return (
        f"{name:20} {shape}, global batch {batch}: ember {ember_rate:7.0f} samples/s, torch DDP "
        f"{torch_rate:7.0f} samples/s, ember/torch {_spread(ratios)}, target >= {target}x: "
        f"{verdict}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs and pairs")
    parser.add_argument("--gpus", type=int, default=0, help="N processes on N GPUs (nccl)")
    parser.add_argument("--epochs", type=int, help="epochs a run (default 2; 1 with --quick)")
    parser.add_argument("--pairs", type=int, help="alternated pairs (default 7; 3 with --quick)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument(
        "--control",
        action="store_true",
        help="a second torch run in every pair: torch/torch shows what the machine's noise allows",
    )
    options = parser.parse_args()
    epochs, pairs = (1, 3) if options.quick else (2, 7)
    epochs, pairs = options.epochs or epochs, options.pairs or pairs
    processes, backend = (options.gpus, "nccl") if options.gpus else (2, "gloo")
    load = os.getloadavg()[0]
    print(
        f"{processes} {backend} processes, 1 thread each, {os.cpu_count()} cores, load average "
        f"{load:.1f} before; median of {pairs} alternated pairs, {epochs} epochs a run"
    )
    for name in options.models:
        times = in_processes(name, epochs, pairs, control=options.control, gpus=options.gpus)
        print(throughput_line(name, times, epochs))
        if options.control:
            control = [pair["torch"] / pair["control"] for pair in times]
            print(f"{'':20} control, torch/torch: {_spread(control)}")
    print(f"load average {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
