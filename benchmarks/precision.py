"""bf16-mixed and torch.compile through the Learner against a raw loop doing the same.

Two models: the MLP 784-256-256-10 (batch 128) and a small convolutional net on 1x28x28
(batch 64). For each, the raw loop runs the forward under ``torch.autocast(bfloat16)`` (or
calls a model compiled with ``nn.Module.compile``), and the Learner gets
``.precision("bf16-mixed")`` (or ``.compile()``). Compilation happens in an untimed warm-up
epoch on both sides; the timed runs (two epochs of 100 steps for the MLP, of 50 for the
convolutional net) alternate raw and Learner, and the median of the pairs' ratios is reported.
A launch's fixed cost (run directory, lock, ``config.json``, logs, threads) is printed on its
own, from one-step runs: it is paid once per run, whatever its length. One intra-op thread; the
load average is printed first and last. Not a test: it prints (target: <= 1.02x).

    python benchmarks/precision.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    ClassificationOutput,
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LossMetric,
    SupervisedTraining,
    TrainOutput,
)
from learner_overhead import MediumMlp, stack_batcher

Batch = tuple[torch.Tensor, torch.Tensor]


class SmallConv(LearnerModel):
    """Conv(1,16,3) → ReLU → Conv(16,32,3) → ReLU → MaxPool(2) → Linear(32·12·12, 10)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 12 * 12, 10),
        )  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def classify(self, batch: Batch) -> ClassificationOutput:
        x, y = batch
        logits = self(x)
        return ClassificationOutput(F.cross_entropy(logits, y), logits, y)

    def train_step(self, batch: Batch) -> TrainOutput[ClassificationOutput]:
        out = self.classify(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> ClassificationOutput:
        return self.classify(batch)


def loader(shape: tuple[int, ...], count: int, batch: int, seed: int) -> DataLoader[Batch]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, *shape, generator=generator)
    y = torch.randint(0, 10, (count,), generator=generator)
    rows = list(zip(x, y, strict=True))
    return DataLoaderBuilder(stack_batcher).batch_size(batch).build(InMemDataset(rows))


def raw(
    model: nn.Module, train: DataLoader[Batch], valid: DataLoader[Batch], epochs: int, bf16: bool
) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    start = time.perf_counter()
    for _ in range(epochs):
        model.train()
        total = torch.zeros(())
        for x, y in train:
            with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
                loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(loss)
            optimizer.step()
            total += loss.detach().float()
        model.eval()
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            for x, y in valid:
                total += F.cross_entropy(model(x), y).float()
        total.item()  # the raw loop reads the loss once per epoch
    return time.perf_counter() - start


def learner(
    model: nn.Module, train: DataLoader[Batch], valid: DataLoader[Batch], epochs: int, bf16: bool
) -> float:
    builder = (
        SupervisedTraining(Path(tempfile.mkdtemp()), train, valid)
        .metric_train_numeric(LossMetric())
        .num_epochs(epochs)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_application_logger(None)
    )
    if bf16:
        builder = builder.precision("bf16-mixed")
    start = time.perf_counter()
    result = builder.launch(Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3)))
    elapsed = time.perf_counter() - start
    assert result.error is None, result.traceback
    return elapsed


def compare(
    name: str,
    make: Callable[[], nn.Module],
    shape: tuple[int, ...],
    batch: int,
    steps: int,
    args: argparse.Namespace,
) -> None:
    train = loader(shape, batch * steps, batch, 1)
    valid = loader(shape, batch, batch, 2)
    for variant in ("bf16-mixed", "compile"):
        bf16, compiled = variant == "bf16-mixed", variant == "compile"
        raw_model, ember_model = make(), make()
        if compiled:
            raw_model.compile()
            ember_model.compile()  # the builder's .compile() does the same, in place
        raw(raw_model, train, valid, 1, bf16)  # warm-up: compilation, allocator
        learner(ember_model, train, valid, 1, bf16)
        ratios, raws, embers = [], [], []
        for _ in range(args.pairs):
            r = raw(raw_model, train, valid, args.epochs, bf16)
            e = learner(ember_model, train, valid, args.epochs, bf16)
            raws.append(r)
            embers.append(e)
            ratios.append(e / r)
        total = steps * args.epochs
        print(
            f"{name}, {variant}: raw {statistics.median(raws) / total * 1e6:.0f} µs/step, "
            f"learner {statistics.median(embers) / total * 1e6:.0f} µs/step, ratio "
            f"{statistics.median(ratios):.3f}x (pairs {min(ratios):.3f}-{max(ratios):.3f}; "
            f"{total} steps a run; target <= 1.02x)",
            flush=True,
        )


def fixed_cost(pairs: int) -> None:
    """A launch's fixed cost: one-step runs of the MLP, Learner minus raw loop."""
    train, valid = loader((784,), 128, 128, 1), loader((784,), 128, 128, 2)
    extra = []
    for _ in range(pairs):
        r = raw(MediumMlp(), train, valid, 1, False)
        extra.append(learner(MediumMlp(), train, valid, 1, False) - r)
    print(
        f"launch's fixed cost: {statistics.median(extra) * 1e3:.1f} ms a run (median of {pairs}; "
        f"{min(extra) * 1e3:.1f}-{max(extra) * 1e3:.1f} ms)",
        flush=True,
    )


def load() -> str:
    with open("/proc/loadavg") as file:
        return "load average " + " ".join(file.read().split()[:3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and pairs")
    args = parser.parse_args()
    scale, args.epochs, args.pairs = (0.3, 1, 3) if args.quick else (1.0, 2, 7)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    print(f"start: {load()}", flush=True)
    fixed_cost(args.pairs)
    compare("MLP 784-256-256-10, batch 128", MediumMlp, (784,), 128, int(100 * scale), args)
    compare("small conv 1x28x28, batch 64", SmallConv, (1, 28, 28), 64, int(50 * scale), args)
    print(f"end: {load()}")


if __name__ == "__main__":
    main()
