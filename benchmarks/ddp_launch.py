"""DDP as a user runs it: ember's ``launch`` against a hand loop around torch's DDP (issue 43).

The model is the 784-256-256-10 MLP (``ddp.py``'s "communication-bound"), Adam (lr 1e-3), a
global batch of 128 rows over 2 gloo processes, 40 training batches and 10 validation batches
an epoch. Both sides train and validate on the same rows (two ``TensorDataset`` tensors made
from one seed):

- **ember**: ``SupervisedTraining`` with ``DistributedDataParallel()``, ``BatchDataLoader`` over
  the tensors (shuffled), ``LossMetric`` on both splits, the CLI renderer (to a sink) and the
  default file logs (the metric files and ``experiment.log``), a ``Learner`` with the optimizer
  built on the model (its own lr: no scheduler);
- **torch**: ``torch.nn.parallel.DistributedDataParallel`` by hand: every epoch a permutation of
  the rows (the same on every rank), each rank indexing its contiguous half of every global
  batch, ``zero_grad``/``backward``/``step``, the validation losses under ``no_grad``, and
  once an epoch one all-reduce of the train and valid loss sums read on the host (what a user
  prints).

Timed on rank 0 from a barrier to a barrier: ember's ``launch`` to its return; torch from the
wrapper's construction to the end of its last epoch. The process group and ember's gloo groups
are set up before the timing on both sides (``spawn``; ``DistributedDataParallel.join``), and
so is ``torch._dynamo``, which torch's ``DistributedDataParallel`` imports when the first one
is made (1-2 s here, on both sides: ember's reducer is torch's).
Every pair is two groups of 2 fresh processes, one begun by each side's 400-step run (10
epochs: what a user's script feels, first-run costs included; the sides alternate which group
comes first). Then, in each group, both sides run 200 and 800 steps, ember, torch, torch,
ember: the difference of a side's two lengths over 600 steps is the marginal cost of its step
(the runs' fixed costs taken out), compared within the group (two comparisons a pair). The
figures are medians of the torch/ember ratios (throughput), with the load average printed;
one intra-op thread per process.

    python benchmarks/ddp_launch.py [--pairs P] [--profile DIR]

``--profile DIR`` runs ember once in 2 processes under cProfile (a 400-step run after a warm-up)
and writes ``rank0.prof`` and ``rank1.prof`` there (``python -m pstats``).
"""

from __future__ import annotations

import argparse
import cProfile
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
from torch.utils.data import TensorDataset

from ddp import Mlp
from ember.data import BatchDataLoader, default_collate
from ember.distributed import spawn
from ember.train import (
    CliMetricsRenderer,
    DistributedDataParallel,
    Learner,
    LossMetric,
    SupervisedTraining,
)

BATCH, TRAIN_BATCHES, VALID_BATCHES, WIDTH = 128, 40, 10, 256
STEPS = {"short": 200, "user": 400, "long": 800}  # runs of 5, 10 and 20 epochs


def rows() -> tuple[TensorDataset, TensorDataset]:
    """The train and valid rows, the same on both sides and every rank."""
    generator = torch.Generator().manual_seed(0)
    count = BATCH * (TRAIN_BATCHES + VALID_BATCHES)
    x = torch.randn(count, 784, generator=generator)
    y = torch.randint(0, 10, (count,), generator=generator)
    cut = BATCH * TRAIN_BATCHES
    return TensorDataset(x[:cut], y[:cut]), TensorDataset(x[cut:], y[cut:])


def ember_run(steps: int, strategy: DistributedDataParallel) -> float:
    """Seconds from ``launch`` to its return (rank 0, between two barriers)."""
    train, valid = rows()
    torch.manual_seed(0)
    model = Mlp(WIDTH)
    with tempfile.TemporaryDirectory() as directory:
        builder = (
            SupervisedTraining(
                Path(directory),
                BatchDataLoader(train, default_collate, batch_size=BATCH, seed=0),
                BatchDataLoader(valid, default_collate, batch_size=BATCH),
            )
            .metric_train_numeric(LossMetric())
            .metric_valid_numeric(LossMetric())
            .renderer(CliMetricsRenderer(io.StringIO()))
            .num_epochs(steps // TRAIN_BATCHES)
            .with_training_strategy(strategy)
        )
        learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3))
        dist.barrier()
        start = time.perf_counter()
        result = builder.launch(learner)
        dist.barrier()
        elapsed = time.perf_counter() - start
    if result.error is not None:
        raise RuntimeError(result.traceback)
    return elapsed


def torch_run(steps: int) -> float:
    """Seconds a hand loop around torch's DDP takes over the same rows (rank 0, between two
    barriers)."""
    train, valid = rows()
    torch.manual_seed(0)
    plain = Mlp(WIDTH)
    rank, world = dist.get_rank(), dist.get_world_size()
    share = BATCH // world
    x, y = train.tensors
    vx, vy = valid.tensors
    generator = torch.Generator().manual_seed(0)
    dist.barrier()
    start = time.perf_counter()
    model = nn.parallel.DistributedDataParallel(plain)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(steps // TRAIN_BATCHES):
        model.train()
        order = torch.randperm(len(x), generator=generator)
        losses = []
        for batch in range(TRAIN_BATCHES):
            mine = order[batch * BATCH + rank * share : batch * BATCH + (rank + 1) * share]
            loss = F.cross_entropy(model(x[mine]), y[mine])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            losses.append(loss.detach())
        model.eval()
        valid_total = torch.zeros(())
        with torch.no_grad():
            for batch in range(VALID_BATCHES):
                first = batch * BATCH + rank * share
                part = slice(first, first + share)
                valid_total += F.cross_entropy(model(vx[part]), vy[part], reduction="sum")
        sums = torch.stack([torch.stack(losses).sum(), valid_total])
        dist.all_reduce(sums)
        sums.tolist()  # the epoch's train and valid losses, read once an epoch
    dist.barrier()
    return time.perf_counter() - start


def _set_up() -> None:
    """What both sides pay before the timing: torch's DDP imports ``torch._dynamo`` the first
    time one is made."""
    import torch._dynamo  # noqa: F401


def _worker(out: str, first: str) -> None:
    """One rank of a fresh group: ``first``'s 400-step run (the group's first: fresh), a short
    run of the other side (its first-run costs, untimed), then each side's 200- and 800-step
    runs in the order ember, torch, torch, ember (drift on a shared machine hits both alike);
    rank 0 writes the times."""
    torch.set_num_threads(1)
    _set_up()
    strategy = DistributedDataParallel()
    strategy.join()  # ember's groups, as the process group, are set up before the timing

    def run(side: str, steps: int) -> float:
        return ember_run(steps, strategy) if side == "ember" else torch_run(steps)

    times: dict[str, dict[str, float]] = {"user": {first: run(first, STEPS["user"])}}
    run("torch" if first == "ember" else "ember", TRAIN_BATCHES)
    for length in ("short", "long"):
        times[length] = {}
        for side in ("ember", "torch", "torch", "ember"):
            times[length][side] = times[length].get(side, 0.0) + run(side, STEPS[length]) / 2
    if dist.get_rank() == 0:
        Path(out).write_text(json.dumps(times), encoding="utf-8")


def _profiled(out: str) -> None:
    """One rank: a warm-up run, then a 400-step run under cProfile, saved per rank."""
    torch.set_num_threads(1)
    _set_up()
    strategy = DistributedDataParallel()
    strategy.join()
    ember_run(STEPS["short"], strategy)
    profile = cProfile.Profile()
    profile.enable()
    ember_run(STEPS["user"], strategy)
    profile.disable()
    profile.dump_stats(os.path.join(out, f"rank{dist.get_rank()}.prof"))


Times = dict[str, dict[str, float]]
"""A group's seconds: by run length (``user``, ``short``, ``long``), then by side."""


def measure(pairs: int) -> list[tuple[Times, Times]]:
    """Each pair's two groups of fresh processes, the first begun by ember's 400-step run and
    the second by torch's (alternately first)."""
    groups: list[tuple[Times, Times]] = []
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "times.json"
        for pair in range(pairs):
            sides = ("ember", "torch") if pair % 2 == 0 else ("torch", "ember")
            made = {}
            for side in sides:
                spawn(_worker, 2, str(out), side, join_timeout=900)
                made[side] = json.loads(out.read_text(encoding="utf-8"))
            groups.append((made["ember"], made["torch"]))
    return groups


def _median(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.3f}x (pairs {min(ratios):.3f}-{max(ratios):.3f})"


def _marginal(group: Times, side: str) -> float:
    """Seconds a step adds: the 800-step run less the 200-step one, over 600 steps."""
    return (group["long"][side] - group["short"][side]) / (STEPS["long"] - STEPS["short"])


def lines(groups: list[tuple[Times, Times]]) -> list[str]:
    """The 400-step row (each side fresh) and the marginal row (both sides in each group),
    each against its target."""
    user = [torch["user"]["torch"] / ember["user"]["ember"] for ember, torch in groups]
    every = [group for pair in groups for group in pair]
    margins = [_marginal(group, "torch") / _marginal(group, "ember") for group in every]
    ember_step = statistics.median(_marginal(group, "ember") for group in every) * 1e3
    torch_step = statistics.median(_marginal(group, "torch") for group in every) * 1e3
    ember_user = statistics.median(ember["user"]["ember"] for ember, _ in groups)
    torch_user = statistics.median(torch["user"]["torch"] for _, torch in groups)
    shape = f"784-{WIDTH}-{WIDTH}-10, global batch {BATCH}, 2 gloo ranks"
    user_target = "met" if statistics.median(user) >= 0.90 else "NOT met"
    margin_target = "met" if statistics.median(margins) >= 0.95 else "NOT met"
    return [
        f"DDP {shape}, Loss on both splits, CLI renderer, file logs: launch to return, 400 "
        f"steps, fresh processes, against torch DDP by hand: {_median(user)} throughput "
        f"(target >= 0.90x: {user_target}; ember {ember_user:.2f} s, torch {torch_user:.2f} s)",
        f"  the marginal step (200- and 800-step runs, both sides in each group): "
        f"{_median(margins)} throughput (target >= 0.95x: {margin_target}; ember "
        f"{ember_step:.2f} ms, torch {torch_step:.2f} ms a step)",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=5, help="alternated pairs (default 5)")
    parser.add_argument("--profile", metavar="DIR", help="profile ember's ranks into DIR")
    options = parser.parse_args()
    if options.profile:
        os.makedirs(options.profile, exist_ok=True)
        spawn(_profiled, 2, os.path.abspath(options.profile), join_timeout=600)
        return
    print(f"load average {os.getloadavg()[0]:.2f} before; {options.pairs} pairs")
    for line in lines(measure(options.pairs)):
        print(line)
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
