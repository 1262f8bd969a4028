"""The seed experiment (``docs/design.md``): a hand-written loop and the Learner, bit for bit.

A two-layer MLP regression (``Linear(4,16) → ReLU → Linear(16,1)``, MSE, Adam, lr 1e-2) on 200
training and 64 validation samples, batch 32. Both runs start from the same weights and read
loaders built the same way; the Learner's per-batch losses are read back from its ``Loss.log``
files, so the comparison also checks what ember writes to disk.
"""

from __future__ import annotations

import copy
import io
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember._errors import TrainingError
from ember.app.rundir import claim_directory, marker_name
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train._builder import SupervisedTraining
from ember.train._learner import Learner
from ember.train._logger.file import FileMetricLogger
from ember.train._metric.loss import LossMetric
from ember.train._outputs import RegressionOutput
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._result import LearningResult
from ember.train._step import LearnerModel, TrainOutput
from ember.train._vocabulary import Split

__all__ = ["DemoReport", "Mlp", "run_demo"]

LEARNING_RATE = 1e-2
BATCH_SIZE = 32


@dataclass(frozen=True, slots=True)
class Sample:
    """One regression sample: four features and a target."""

    x: tuple[float, float, float, float]
    y: float


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of samples as tensors: ``x [B, 4]``, ``y [B, 1]``."""

    x: torch.Tensor
    y: torch.Tensor


def sample_batcher(items: list[Sample], device: torch.device) -> Batch:
    """Stack samples into a :class:`Batch` on ``device``."""
    x = torch.tensor([item.x for item in items], dtype=torch.float32, device=device)
    y = torch.tensor([[item.y] for item in items], dtype=torch.float32, device=device)
    return Batch(x, y)


def make_samples(count: int, seed: int) -> list[Sample]:
    """``count`` samples of a noisy linear function, reproducible from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 4, generator=generator)
    y = x @ torch.tensor([1.5, -2.0, 0.5, 1.0]) + 0.1 * torch.randn(count, generator=generator)
    return [
        Sample((float(r[0]), float(r[1]), float(r[2]), float(r[3])), float(t))
        for r, t in zip(x.tolist(), y.tolist(), strict=True)
    ]


class Mlp(LearnerModel):
    """The seed's model: ``Linear(4,16) → ReLU → Linear(16,1)`` trained with MSE."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 16)
        self.act = nn.ReLU()
        self.l2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network."""
        out: torch.Tensor = self.l2(self.act(self.l1(x)))
        return out

    def regression(self, batch: Batch) -> RegressionOutput:
        """Forward and loss."""
        out = self(batch.x)
        return RegressionOutput(loss=F.mse_loss(out, batch.y), output=out, targets=batch.y)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        """Forward and backward."""
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        """Forward only."""
        return self.regression(batch)


def _loader(samples: list[Sample], workers: int, shuffle: int | None) -> DataLoader[Batch]:
    builder = DataLoaderBuilder(sample_batcher).batch_size(BATCH_SIZE).num_workers(workers)
    if shuffle is not None:
        builder = builder.shuffle(shuffle)
    return builder.build(InMemDataset(samples))


def hand_loop(model: Mlp, loader: DataLoader[Batch], epochs: int) -> list[float]:
    """The raw PyTorch loop of the seed; returns each step's loss."""
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    losses = []
    model.train()
    for _ in range(epochs):
        for batch in loader:
            loss = model.regression(batch).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            optimizer.step()
            losses.append(loss.item())
    return losses


@dataclass(frozen=True, slots=True)
class DemoReport:
    """What the demo measured."""

    hand: list[float]
    learner: list[float]
    result: LearningResult[Mlp]
    output: str

    @property
    def identical(self) -> bool:
        """Every step's loss is the same float in both runs."""
        return len(self.hand) == len(self.learner) and all(
            a == b for a, b in zip(self.hand, self.learner, strict=True)
        )


def run_demo(
    directory: Path, *, epochs: int = 3, workers: int = 0, shuffle: int | None = None
) -> DemoReport:
    """Run both loops; the Learner's lines are captured into ``DemoReport.output``."""
    claim_directory(directory, "demo")
    train_samples, valid_samples = make_samples(200, seed=1), make_samples(64, seed=2)
    torch.manual_seed(0)
    model = Mlp()
    hand = hand_loop(copy.deepcopy(model), _loader(train_samples, workers, shuffle), epochs)

    buffer = io.StringIO()
    training = (
        SupervisedTraining(
            directory,
            _loader(train_samples, workers, shuffle),
            _loader(valid_samples, workers, None),
        )
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .with_default_checkpointers()
        .num_epochs(epochs)
        .renderer(CliMetricsRenderer(buffer))
        .summary()
    )
    try:
        result = training.launch(
            Learner(model, torch.optim.Adam(model.parameters()), LEARNING_RATE)
        )
    except TrainingError as failure:  # reported with the Learner's output, which shows it
        result = failure.result
    logged = FileMetricLogger(directory)
    learner = [
        entry.value
        for epoch in range(1, result.last_epoch + 1)
        for entry in logged.read_numeric("Loss", epoch, Split.TRAIN)
        if not entry.final
    ]
    return DemoReport(hand, learner, result, buffer.getvalue())


def format_report(report: DemoReport, directory: Path) -> str:
    """The seed's comparison table, the Learner's output and the run directory listing."""
    lines = [f"{'step':>4}  {'hand':<10}  {'learner':<10}  equal"]
    for step, (a, b) in enumerate(zip(report.hand, report.learner, strict=False)):
        lines.append(f"{step:>4}  {a:<10.8f}  {b:<10.8f}  {str(a == b).lower()}")
    lines.append(f"all {len(report.hand)} losses bit-identical: {str(report.identical).lower()}")
    lines.append("")
    lines.append(report.output.rstrip())
    lines.append("")
    for path in sorted(
        p for p in directory.rglob("*") if p.is_file() and p.name != marker_name("demo")
    ):
        lines.append(f"{path.stat().st_size:>6} {path}")
    return "\n".join(lines)
