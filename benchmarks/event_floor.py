"""The event path at its floor: every figure of the issue with its target, side by side in one run.

1. The Learner with the default metric files against a raw PyTorch loop over the same loaders
   (``learner_overhead.py``'s loops): the seed workload (97-parameter MLP, target <= 1.05x) and
   an MLP 784-256-256-10 at batch 128 (target <= 1.01x), each on a quiet machine and with one
   CPU-bound process beside it (a Python busy loop this benchmark starts; targets <= 1.10x and
   <= 1.01x). For where the time goes, beside them: the Learner logging to memory
   (no files), and the raw loop alone against the raw loop while another process makes the
   seed's metric directories and files at its pace (what those files cost any program on this
   machine, whoever makes them).
2. ember end to end (its own loader, ``default_collate`` over a ``TensorDataset``, and the
   Learner) against the hand loop a PyTorch user writes over ``torch.utils.data.DataLoader`` on
   the seed workload (target <= 0.90x).
3. Loaders, batch 32, shuffled, against ``torch.utils.data.DataLoader(num_workers=0)`` with its
   default collate: ``BatchDataLoader`` on in-memory rows (target >= 3x items/s) and on a
   ``TensorDataset`` (one gather per tensor; target >= 8x).
4. ``import ember`` beyond ``import torch`` in fresh interpreters, with the bytecode cache a pip
   install has (target <= +0.15 s), and without one (``PYTHONDONTWRITEBYTECODE``: every module
   of ember compiled at each import).

Each figure is the median of the ratios of alternated pairs (the two contenders run one after
the other, repeat after repeat), so drift on a shared machine hits both alike; beside it, the
median ratio of the pairs' CPU seconds (this process and the children it waited for), which
another engineer's tests running meanwhile move much less. One intra-op thread. Not a test: it
prints; ``uptime`` is printed first and last.

    python benchmarks/event_floor.py [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from ember.app.demo import Mlp, make_samples
from ember.data import BatchDataLoader, InMemDataset, default_collate
from ember.train import RegressionOutput, TrainOutput
from learner_overhead import (
    RUNS,
    disk_probe,
    learner_run,
    medium_workload,
    raw_loop,
    seed_workload,
)


class Times(dict[str, list[float]]):
    """Each contender's seconds (what its run returned), and in ``cpu`` the CPU seconds of this
    process and of the children it waited for (a metric-writer) while the run went: on a
    machine shared with other work, the wall-clock ratio follows whoever else runs; the CPU
    ratio much less (it still grows when a busy neighbour slows the caches and the core)."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__({name: [] for name in names})
        self.cpu: dict[str, list[float]] = {name: [] for name in self}


def cpu_seconds() -> float:
    """CPU seconds of this process and its waited-for children so far."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pairs(contenders: dict[str, Callable[[], float]], repeats: int) -> Times:
    """Seconds (and CPU seconds) of each contender, run alternately ``repeats`` times."""
    times = Times(contenders)
    for _ in range(repeats):
        for name, run in contenders.items():
            start = cpu_seconds()
            times[name].append(run())
            times.cpu[name].append(cpu_seconds() - start)
    return times


def report(label: str, times: dict[str, list[float]], base: str, other: str, target: str) -> None:
    """The median ratio ``other / base`` of the pairs, with the target it is held to (and the
    median ratio of their CPU seconds, when measured)."""
    ratios = sorted(b / a for a, b in zip(times[base], times[other], strict=True))
    cpu = ""
    if isinstance(times, Times):
        cpu_ratios = [b / a for a, b in zip(times.cpu[base], times.cpu[other], strict=True)]
        cpu = f"; CPU time {statistics.median(cpu_ratios):.3f}x"
    print(
        f"{label}: {statistics.median(ratios):.3f}x (target {target}; pairs "
        f"{ratios[0]:.3f}-{ratios[-1]:.3f}; {base} {statistics.median(times[base]):.3f} s, "
        f"{other} {statistics.median(times[other]):.3f} s{cpu})"
    )


@contextmanager
def busy_core() -> Iterator[None]:
    """One CPU-bound process beside the benchmark (a Python busy loop) while the block runs."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        process.kill()
        process.wait()


FILE_MAKER = """
import os, sys, time
base, period = sys.argv[1], float(sys.argv[2])
epoch = 0
while True:
    for split in ("train", "valid"):
        directory = os.path.join(base, split, f"epoch-{epoch}")
        os.makedirs(directory)
        with open(os.path.join(directory, "Loss.log"), "w") as file:
            file.write("0.5,32\\n")
    epoch += 1
    time.sleep(period)
"""


@contextmanager
def files_made_beside(period: float) -> Iterator[None]:
    """Another process making an epoch's metric directories and files every ``period`` s."""
    base = tempfile.mkdtemp(dir=RUNS.name)
    process = subprocess.Popen([sys.executable, "-c", FILE_MAKER, base, str(period)])
    try:
        yield
    finally:
        process.kill()
        process.wait()


def file_floor(epochs: int, repeats: int) -> None:
    """The raw seed loop alone against the same loop while another process makes the metric
    files the Learner would make, at the same pace: what the files cost any program here."""

    def raw() -> float:
        model, loss_fn, train, valid = seed_workload()
        return raw_loop(model, loss_fn, train, valid, epochs)

    period = raw() / epochs

    def raw_beside_files() -> float:
        with files_made_beside(period):
            return raw()

    times = pairs({"raw": raw, "raw beside": raw_beside_files}, repeats)
    report(
        "  the raw loop while another process makes the same files at its pace (this machine's "
        "floor for file logs; for reference)",
        times,
        "raw",
        "raw beside",
        "-",
    )


def learner_vs_raw(name: str, make: Any, epochs: int, repeats: int, targets: tuple[str, str]):
    """Learner (metric files) against the raw loop over the same loaders, quiet then busy; and,
    for where the time goes, the Learner logging to memory (no files) beside them."""

    def raw() -> float:
        model, loss_fn, train, valid = make()
        return raw_loop(model, loss_fn, train, valid, epochs)

    def learner(in_memory: bool) -> Callable[[], float]:
        def run() -> float:
            model, _, train, valid = make()
            return learner_run(model, train, valid, epochs, in_memory=in_memory)

        return run

    contenders = {"raw": raw, "learner": learner(False), "in memory": learner(True)}
    for condition, target in (("quiet", targets[0]), ("busy core", targets[1])):
        with busy_core() if condition == "busy core" else nullcontext():
            times = pairs(contenders, repeats)
        report(f"{name}, {condition}", times, "raw", "learner", target)
        report(
            "  the same, metrics in memory (no files; for reference)",
            times,
            "raw",
            "in memory",
            "-",
        )


class TupleMlp(Mlp):
    """The seed model on ``(x, y)`` batches, as a PyTorch user's ``TensorDataset`` gives them."""

    def regression(self, batch: Any) -> RegressionOutput:
        x, y = batch
        out = self(x)
        return RegressionOutput(loss=F.mse_loss(out, y), output=out, targets=y)

    def train_step(self, batch: Any) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Any) -> RegressionOutput:
        return self.regression(batch)


def seed_tensors(count: int, seed: int) -> TensorDataset:
    samples = make_samples(count, seed)
    x = torch.tensor([s.x for s in samples], dtype=torch.float32)
    y = torch.tensor([[s.y] for s in samples], dtype=torch.float32)
    return TensorDataset(x, y)


def end_to_end(epochs: int, repeats: int) -> None:
    """ember (own loader + Learner) against a raw loop over torch's DataLoader, seed workload."""
    train, valid = seed_tensors(200, 1), seed_tensors(64, 2)

    def loss_fn(model: nn.Module, batch: Any) -> torch.Tensor:
        assert isinstance(model, TupleMlp)
        return model.regression(batch).loss

    def raw() -> float:
        torch.manual_seed(0)
        loaders = TorchLoader(train, batch_size=32, shuffle=True), TorchLoader(valid, 32)
        return raw_loop(TupleMlp(), loss_fn, *loaders, epochs)  # type: ignore[arg-type]

    def ember() -> float:
        torch.manual_seed(0)
        loaders = (
            BatchDataLoader(train, default_collate, batch_size=32, seed=0),
            BatchDataLoader(valid, default_collate, batch_size=32),
        )
        return learner_run(TupleMlp(), *loaders, epochs, in_memory=False)

    times = pairs({"torch loader + raw loop": raw, "ember": ember}, repeats)
    report(
        "ember end to end vs raw loop over torch's DataLoader, seed workload",
        times,
        "torch loader + raw loop",
        "ember",
        "<= 0.90x",
    )


def one_pass(loader: Iterable[Any]) -> Callable[[], float]:
    def run() -> float:
        start = time.perf_counter()
        for _ in loader:
            pass
        return time.perf_counter() - start

    return run


def loaders(repeats: int) -> None:
    """ember's loaders against torch's (num_workers=0, default collate), batch 32, shuffled."""
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(20_000, 4, generator=generator), torch.randn(20_000, generator=generator)
    rows = list(zip(x.unbind(), y.tolist(), strict=True))
    for label, data, target in (
        ("in-memory rows", rows, ">= 3x"),
        ("TensorDataset (one gather per tensor)", TensorDataset(x, y), ">= 8x"),
    ):
        torch.manual_seed(0)
        theirs = TorchLoader(data, batch_size=32, shuffle=True)  # type: ignore[arg-type]
        dataset = InMemDataset(rows) if data is rows else data
        ours = BatchDataLoader(dataset, default_collate, batch_size=32, seed=0)  # type: ignore[arg-type]
        times = pairs({"torch": one_pass(theirs), "ember": one_pass(ours)}, repeats)
        speedups = sorted(a / b for a, b in zip(times["torch"], times["ember"], strict=True))
        print(
            f"BatchDataLoader, {label}, items/s vs torch: {statistics.median(speedups):.2f}x "
            f"(target {target}; pairs {speedups[0]:.2f}-{speedups[-1]:.2f}; a pass: torch "
            f"{statistics.median(times['torch']):.3f} s, "
            f"ember {statistics.median(times['ember']):.3f} s)"
        )


def import_cost(repeats: int) -> None:
    """``import torch, ember`` against ``import torch``, fresh interpreters, alternated.

    The reference row takes out the full garbage collection that ``import torch`` leaves owed:
    the first ~20,000 objects any program allocates after it trigger a collection over torch's
    ~170,000 objects (~0.1 s here), and ember's import is usually what pays it.
    """
    cache = tempfile.mkdtemp(prefix="ember-pyc-")
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cached = {**base, "PYTHONPYCACHEPREFIX": cache}
    collected = "import gc, torch; gc.collect()"
    for label, env, torch_code, target in (
        ("with the bytecode cache", cached, "import torch", "<= +0.15 s"),
        (
            "compiling every import",
            {**base, "PYTHONDONTWRITEBYTECODE": "1"},
            "import torch",
            "<= +0.15 s",
        ),
        (
            "  the same with the cache, after torch's owed collection (for reference)",
            cached,
            collected,
            "-",
        ),
    ):
        subprocess.run([sys.executable, "-c", "import torch, ember"], check=True, env=env)

        def fresh(code: str, env: dict[str, str] = env) -> Callable[[], float]:
            def run() -> float:
                start = time.perf_counter()
                subprocess.run([sys.executable, "-c", code], check=True, env=env)
                return time.perf_counter() - start

            return run

        times = pairs(
            {"torch": fresh(torch_code), "ember": fresh(f"{torch_code}; import ember")}, repeats
        )
        extra = sorted(b - a for a, b in zip(times["torch"], times["ember"], strict=True))
        print(
            f"import ember, {label}: {statistics.median(extra):+.3f} s beyond import torch "
            f"(target {target}; pairs {extra[0]:+.3f} to {extra[-1]:+.3f}; torch alone "
            f"{statistics.median(times['torch']):.3f} s)"
        )


def uptime() -> str:
    with open("/proc/loadavg") as file:
        return "load average " + " ".join(file.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer epochs and repeats")
    args = parser.parse_args()
    torch.set_num_threads(1)
    repeats = 5 if args.quick else 9
    print(f"start: {uptime()} ({os.cpu_count()} CPUs)")
    print(
        f"this disk: {disk_probe():.0f} µs to make an epoch directory and its file (the seed "
        "workload makes two of each an epoch; ~40 µs on a quiet local disk)"
    )
    learner_vs_raw(
        "seed workload (97-param MLP), metric files",
        seed_workload,
        30 if args.quick else 200,
        repeats,
        ("<= 1.05x", "<= 1.10x"),
    )
    file_floor(30 if args.quick else 200, repeats)
    learner_vs_raw(
        "MLP 784-256-256-10, batch 128, metric files",
        medium_workload,
        1,
        3 if args.quick else 5,
        ("<= 1.01x", "<= 1.01x"),
    )
    end_to_end(30 if args.quick else 200, repeats)
    loaders(repeats)
    import_cost(repeats)
    print(f"end: {uptime()}")


if __name__ == "__main__":
    main()
