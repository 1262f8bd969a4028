"""Per-epoch asynchronous checkpoints of a ~50 MB model against the same run without them.

Both runs train the same model (three 2048x2048 linear layers, 12.6 M parameters, 50 MB of
weights plus 100 MB of Adam state) for the same epochs; one writes a checkpoint after every
epoch with ``with_default_checkpointers()`` (snapshot on the training thread, safetensors +
SHA-256 manifest written on the ``checkpoint-writer`` thread). Epochs of 200 steps take about
ten seconds here; a checkpoint costs the training thread ~20 ms (the snapshot) and the writer
about a second on the other core, so with 2-second epochs (``--steps 40``) the ratio is ~1.1x.
``launch`` returns only once the last checkpoint is on disk, so that write is part of the
time. One intra-op thread, runs alternated, medians reported. Target (docs/design.md): <= 1.03x.
Not a test: it prints.

    python benchmarks/checkpoint.py [--quick] [--steps N]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)

WIDTH = 2048


class Wide(LearnerModel):
    """Three 2048x2048 layers: 50 MB of float32 weights."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(WIDTH, WIDTH),
            nn.ReLU(),
            nn.Linear(WIDTH, WIDTH),
            nn.ReLU(),
            nn.Linear(WIDTH, WIDTH),
        )

    def regression(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        x, y = batch
        out = self.net(x)
        return RegressionOutput(F.mse_loss(out, y), out, y)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        return self.regression(batch)


def stack(
    items: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.stack([x for x, _ in items]), torch.stack([y for _, y in items])


def run(checkpoints: bool, epochs: int, steps: int) -> float:
    torch.manual_seed(0)
    rows = [(torch.randn(WIDTH), torch.randn(WIDTH)) for _ in range(steps * 32)]
    loader = DataLoaderBuilder(stack).batch_size(32)
    train, valid = loader.build(InMemDataset(rows)), loader.build(InMemDataset(rows[:32]))
    model = Wide()
    with tempfile.TemporaryDirectory() as directory:
        builder = (
            SupervisedTraining(Path(directory), train, valid)
            .metrics(LossMetric())
            .num_epochs(epochs)
            .renderer(CliMetricsRenderer(io.StringIO()))
        )
        if checkpoints:
            builder = builder.with_default_checkpointers()
        learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), 1e-4)
        start = time.perf_counter()
        result = builder.launch(learner)  # launch waits for the last checkpoint to be written
        elapsed = time.perf_counter() - start
        if result.error is not None:
            raise result.error
        if checkpoints:
            sizes = sum(p.stat().st_size for p in (Path(directory) / "checkpoint").iterdir())
            print(f"  checkpoint directory at the end: {sizes / 1e6:.0f} MB")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None, help="steps per epoch")
    args = parser.parse_args()
    torch.set_num_threads(1)
    epochs, steps, repeats = (2, 20, 1) if args.quick else (4, 200, 2)
    steps = args.steps or steps
    without, with_ = [], []
    for _ in range(repeats):
        without.append(run(False, epochs, steps))
        with_.append(run(True, epochs, steps))
    a, b = statistics.median(without), statistics.median(with_)
    print(
        f"{epochs} epochs x {steps} steps: without checkpoints {a:.2f} s, with per-epoch async "
        f"checkpoints {b:.2f} s, ratio {b / a:.3f}x (medians of {repeats})"
    )


if __name__ == "__main__":
    main()
