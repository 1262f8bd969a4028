"""Speed where users feel it: every target of issue 30, each against its raw equivalent, in one run.

1. **The user's torch DataLoader**, seed workload (the seed's MLP on a ``TensorDataset``, batch 32
   shuffled, validation every epoch: 700 optimizer steps in 100 epochs, the Learner with its
   Loss metrics and the CLI renderer to a sink): ember given ``torch.utils.data.DataLoader``
   objects (adapted by ``TorchDataLoader``) against a raw loop over the same loaders, with the
   metrics in memory (target <= 1.05x) and with the default file logs (short rounds with metric
   files: target <= 1.10x), and against Ignite's lean loop (an ``Engine`` with the same update
   and an evaluator run at each epoch's end, nothing attached: ember in memory below it) when
   ``pytorch-ignite`` is installed (``pip install ember[bench]``).
2. **The seed workload with its metric files on ember's loader**, quiet and beside a busy core
   (``event_floor.learner_vs_raw``; targets <= 1.05x, <= 1.10x).
3. **A generator-fed tiny step** (pytorch/examples' polynomial regression: a ``Linear(4, 1)``
   on batches of 32 made by a generator, SGD): ember's ``StreamingDataLoader`` over the
   generator against a raw loop over the same generator (target <= 1.10x).
4. **DDP on a tiny model** (``Linear(20, 1)``, 2 gloo processes, steady state in the same
   processes, ``ddp.py``'s "tiny"): target ember >= 0.91x torch DDP by hand (<= 1.10x time).
5. **DDP as a user runs it** (``ddp_launch.py``: the 784-256-256-10 MLP, global batch 128 over 2
   gloo processes, Adam, ``LossMetric`` on both splits, the CLI renderer and the default file
   logs, against a hand loop around ``torch.nn.parallel.DistributedDataParallel`` on the same
   rows; the process groups set up before the timing on both sides): ``launch`` to its return
   at 400 steps, the first run of fresh processes (target >= 0.90x throughput), and the
   marginal cost of a step between a 200- and an 800-step run (target >= 0.95x).
6. **200 one-step rounds** (the seed MLP full-batch, as a GCN trains: one optimizer step and one
   validation batch a round, 200 rounds): ember with its file logs against a raw loop that
   writes the same values (the round, the train loss, the valid loss) to one CSV file
   (target <= 1.10x).

Where the time goes: rows with metric files print the same run with its metrics in memory
beside them; the raw seed loop beside another process that makes the same epoch files at its
pace (``event_floor.file_floor``) is this machine's floor for file logs; the disk's speed at
making an epoch directory and its file is printed first and last (it varies tenfold over
minutes on a shared virtual machine, and the file rows with it).

Each figure is the median of the ratios of alternated pairs (``event_floor.pairs``), one
intra-op thread, with the median ratio of their CPU seconds beside it (single-process rows);
the load average is printed before every row and at the end: on a shared machine read the
ratios, not the seconds. Not a test: it prints.

    python benchmarks/user_loops.py [--quick]      # make bench-user
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader as TorchLoader

import ddp
import ddp_launch
from ember.data import BatchDataLoader, StreamingDataLoader, default_collate
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)
from event_floor import (
    TupleMlp,
    file_floor,
    learner_vs_raw,
    pairs,
    report,
    seed_tensors,
    uptime,
)
from learner_overhead import (
    RUNS,
    disk_probe,
    learner_run,
    raw_loop,
    seed_workload,
    timed_launch,
)


def loss_of(model: nn.Module, batch: Any) -> torch.Tensor:
    assert isinstance(model, TupleMlp)
    return model.regression(batch).loss


# --- 1. the user's torch DataLoader -------------------------------------------------------------


def torch_loaders() -> tuple[TorchLoader[Any], TorchLoader[Any]]:
    torch.manual_seed(0)
    train, valid = seed_tensors(200, 1), seed_tensors(64, 2)
    return TorchLoader(train, batch_size=32, shuffle=True), TorchLoader(valid, batch_size=32)


def ignite_loop(epochs: int) -> float:
    """Ignite's lean loop: the raw loop's update and validation in two ``Engine`` objects,
    nothing attached but the evaluator's run at each epoch's end."""
    from ignite.engine import Engine, Events

    model = TupleMlp()
    train, valid = torch_loaders()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    total = torch.zeros(())

    def update(engine: Engine, batch: Any) -> torch.Tensor:
        model.train()
        loss = loss_of(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        total.add_(loss.detach())
        return loss.detach()

    def evaluate(engine: Engine, batch: Any) -> torch.Tensor:
        model.eval()
        with torch.inference_mode():
            loss = loss_of(model, batch)
        total.add_(loss)
        return loss

    trainer, evaluator = Engine(update), Engine(evaluate)

    @trainer.on(Events.EPOCH_COMPLETED)
    def validate(engine: Engine) -> None:
        evaluator.run(valid)
        total.item()  # the loss read once per epoch, as the raw loop does

    start = time.perf_counter()
    trainer.run(train, max_epochs=epochs)
    return time.perf_counter() - start


def torch_loader_runs(epochs: int) -> dict[str, Callable[[], float]]:
    """The raw loop over the user's torch DataLoader, and ember over it with its default metric
    files and with its metrics in memory: each a run's seconds."""

    def raw() -> float:
        return raw_loop(TupleMlp(), loss_of, *torch_loaders(), epochs)  # type: ignore[arg-type]

    def ember() -> float:
        return learner_run(TupleMlp(), *torch_loaders(), epochs, in_memory=False)  # type: ignore[arg-type]

    def in_memory() -> float:
        return learner_run(TupleMlp(), *torch_loaders(), epochs, in_memory=True)  # type: ignore[arg-type]

    return {"raw": raw, "ember": ember, "in memory": in_memory}


def torch_dataloader(epochs: int, repeats: int) -> None:
    """ember and Ignite over the user's torch DataLoader against the raw loop over it."""
    contenders = torch_loader_runs(epochs)
    try:
        import ignite  # noqa: F401
    except ImportError:
        print("  Ignite: not installed (pip install ember[bench]): its rows are left out")
    else:
        contenders["ignite"] = lambda: ignite_loop(epochs)
    times = pairs(contenders, repeats)
    label = f"ember over the user's torch DataLoader, seed workload ({7 * epochs} steps)"
    report(f"{label}, metrics in memory", times, "raw", "in memory", "<= 1.05x")
    report("  the same with the default metric files", times, "raw", "ember", "<= 1.10x")
    if "ignite" in times:
        report("  Ignite's lean loop over it", times, "raw", "ignite", "-")
        report(
            "  ember (in memory) against Ignite's lean loop",
            times,
            "ignite",
            "in memory",
            "< 1.00x",
        )


# --- 3. a generator-fed tiny step ---------------------------------------------------------------


class Polynomial(LearnerModel):
    """pytorch/examples' regression: a polynomial of degree 4 fitted by a ``Linear(4, 1)``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.fc(x)
        return out

    def regression(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        x, y = batch
        out = self(x)
        return RegressionOutput(F.smooth_l1_loss(out, y), out, y)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> TrainOutput[Any]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        return self.regression(batch)


def polynomial_batches(steps: int) -> Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """The example's ``get_batch()``, ``steps`` times a pass: random points, their powers, the
    target polynomial's values."""
    generator = torch.Generator().manual_seed(0)
    weights, bias = torch.randn(4, 1, generator=generator) * 5, torch.randn(1, generator=generator)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for _ in range(steps):
            x = torch.randn(32, generator=generator).unsqueeze(1)
            features = torch.cat([x**i for i in range(1, 5)], 1)
            yield features, features.mm(weights) + bias

    return batches


def first_item(items: list[Any], device: torch.device) -> Any:
    return items[0]  # the generator makes whole batches


def generator_runs(steps: int) -> dict[str, Callable[[], float]]:
    """A raw loop over a batch generator and ember's streaming loader over the same one: each
    a run's seconds."""

    def raw() -> float:
        torch.manual_seed(0)
        model, batches = Polynomial(), polynomial_batches(steps)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        start = time.perf_counter()
        total = torch.zeros(())
        for batch in batches():
            loss = model.regression(batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.detach()
        total.item()
        return time.perf_counter() - start

    def ember() -> float:
        torch.manual_seed(0)
        model = Polynomial()
        loader = StreamingDataLoader(polynomial_batches(steps), first_item)
        builder = (
            SupervisedTraining(Path(tempfile.mkdtemp(dir=RUNS.name)), loader)
            .metric_train_numeric(LossMetric())
            .renderer(CliMetricsRenderer(io.StringIO()))
        )
        learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1)
        return timed_launch(builder, learner)

    return {"raw": raw, "ember": ember}


def generator_step(steps: int, repeats: int) -> None:
    """A raw loop over a batch generator against ember's streaming loader over the same one."""
    times = pairs(generator_runs(steps), repeats)
    step = min(times["raw"]) / steps * 1e6
    report(
        f"generator-fed tiny step ({steps} steps of ~{step:.0f} µs raw), streaming loader",
        times,
        "raw",
        "ember",
        "<= 1.10x",
    )


# --- 4, 5. DDP ----------------------------------------------------------------------------------


def distributed(pairs_in: int, pairs_launch: int) -> None:
    """Tiny-model DDP in warm processes; the MLP as a user runs it (``ddp_launch.py``)."""
    times = ddp.in_processes("tiny", 2, pairs_in)
    print(f"DDP, 2 gloo processes, warm, 400 steps: {ddp.throughput_line('tiny', times, 2)}")
    print(f"  ({uptime()})")
    for line in ddp_launch.lines(ddp_launch.measure(pairs_launch)):
        print(line)


# --- 6. one-step rounds -------------------------------------------------------------------------


def one_step_rounds(rounds: int, repeats: int) -> None:
    """ember's one-step rounds against a raw loop writing the same values to one CSV file."""
    train, valid = seed_tensors(200, 1), seed_tensors(64, 2)

    def loaders() -> tuple[BatchDataLoader[Any, Any], BatchDataLoader[Any, Any]]:
        torch.manual_seed(0)
        return (
            BatchDataLoader(train, default_collate, batch_size=200, seed=0),
            BatchDataLoader(valid, default_collate, batch_size=64),
        )

    def raw() -> float:
        model, (train_loader, valid_loader) = TupleMlp(), loaders()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        path = os.path.join(tempfile.mkdtemp(dir=RUNS.name), "losses.csv")
        start = time.perf_counter()
        with open(path, "w", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["round", "train_loss", "valid_loss"])
            for index in range(1, rounds + 1):
                model.train()
                for batch in train_loader:
                    loss = loss_of(model, batch)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()  # type: ignore[no-untyped-call]
                    optimizer.step()
                model.eval()
                with torch.inference_mode():
                    valid_loss = sum(loss_of(model, batch) for batch in valid_loader)
                writer.writerow([index, loss.item(), float(valid_loss)])
        return time.perf_counter() - start

    def ember(in_memory: bool) -> Callable[[], float]:
        return lambda: learner_run(TupleMlp(), *loaders(), rounds, in_memory=in_memory)

    times = pairs({"raw": raw, "ember": ember(False), "in memory": ember(True)}, repeats)
    report(
        f"{rounds} one-step rounds, metric files, against a raw loop writing one CSV",
        times,
        "raw",
        "ember",
        "<= 1.10x",
    )
    report(
        "  the same, metrics in memory (no files; for reference)", times, "raw", "in memory", "-"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier medians)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    repeats = 5 if args.quick else 11
    print(f"start: {uptime()} ({os.cpu_count()} CPUs); medians of {repeats} alternated pairs")
    print(
        f"this disk: {disk_probe():.0f} µs to make an epoch directory and its file (a seed "
        "epoch makes two directories and four files; ~40 µs on a quiet local disk)"
    )
    rows: list[tuple[Callable[..., None], tuple[Any, ...]]] = [
        (torch_dataloader, (100, repeats)),
        (
            learner_vs_raw,
            (
                "seed workload (700 steps), metric files, ember's loader",
                seed_workload,
                100,
                repeats,
                ("<= 1.05x", "<= 1.10x"),
            ),
        ),
        (file_floor, (100, repeats)),
        (generator_step, (2000, repeats)),
        (distributed, (3, 3) if args.quick else (7, 5)),
        (one_step_rounds, (200, repeats)),
    ]
    for row, arguments in rows:
        row(*arguments)
        print(f"  ({uptime()})")
    print(f"end: {uptime()}; this disk: {disk_probe():.0f} µs a directory and its file")


if __name__ == "__main__":
    main()
