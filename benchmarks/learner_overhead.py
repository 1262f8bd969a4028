"""Learner overhead against a raw PyTorch loop doing the same work (DESIGN §10).

Both loops train the same model from the same weights on batches from identical ember loaders,
with the same optimizer, and validate every epoch; the raw loop reads the loss once per epoch,
the Learner logs every batch's loss through its metrics thread. One intra-op thread
(``torch.set_num_threads(1)``), runs alternated, medians reported. Not a test: it prints.

    python benchmarks/learner_overhead.py [--quick]
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.demo import Batch, Mlp, make_samples, sample_batcher
from ember.train import (
    ClassificationOutput,
    CliMetricsRenderer,
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


def learner_run(
    model: nn.Module, train: DataLoader[object], valid: DataLoader[object], epochs: int
) -> float:
    builder = (
        SupervisedTraining(Path(tempfile.mkdtemp(dir=RUNS.name)), train, valid)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(epochs)
        .renderer(CliMetricsRenderer(io.StringIO()))
    )
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-3), 1e-3)
    start = time.perf_counter()
    result = builder.launch(learner)
    elapsed = time.perf_counter() - start
    if result.error is not None:
        raise result.error
    return elapsed


def compare(
    name: str,
    make: Callable[
        [],
        tuple[
            nn.Module,
            Callable[[nn.Module, object], torch.Tensor],
            DataLoader[object],
            DataLoader[object],
        ],
    ],
    epochs: int,
    repeats: int,
) -> None:
    raw_times, learner_times = [], []
    steps = 0
    for _ in range(repeats):
        model, loss_fn, train, valid = make()
        steps = len(train) * epochs
        raw_times.append(raw_loop(model, loss_fn, train, valid, epochs))
        model, loss_fn, train, valid = make()
        learner_times.append(learner_run(model, train, valid, epochs))
    raw, learner = statistics.median(raw_times), statistics.median(learner_times)
    pairs = sorted(b / a for a, b in zip(raw_times, learner_times, strict=True))
    print(
        f"{name}: raw {raw * 1e6 / steps:.0f} µs/step, "
        f"learner {learner * 1e6 / steps:.0f} µs/step, ratio {learner / raw:.3f}x, "
        f"overhead {(learner - raw) * 1e6 / steps:+.1f} µs/step "
        f"(medians of {repeats}, {steps} train steps each; "
        f"ratios of the pairs {pairs[0]:.3f}-{pairs[-1]:.3f})"
    )


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
    compare("seed workload (97-param MLP)", seed_workload, 30 if quick else 300, 3 if quick else 5)
    compare("MLP 784-256-256-10, batch 128", medium_workload, 1 if quick else 2, 3 if quick else 7)
    import_cost()


if __name__ == "__main__":
    main()
