"""The learner summary table (docs/design.md) and describe_model."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember._table import format_cell
from ember.data import DataLoaderBuilder, InMemDataset
from ember.runs import compare, load
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LearnerSummary,
    LossMetric,
    MetricSummary,
    Split,
    SupervisedTraining,
    TrainOutput,
)
from ember.train._summary import describe_model


class FakeQuery:
    def __init__(self, values: dict[tuple[str, Split], list[float]]) -> None:
        self.values = values

    def find_metric(self, name: str, epoch: int, split: Split) -> float | None:
        series = self.values.get((name, split), [])
        return series[epoch - 1] if epoch <= len(series) else None

    def find_epoch(self, *args: object) -> int | None:
        raise AssertionError("not used")


def test_table_matches_the_seed() -> None:
    """The seed's example table, character for character."""
    query = FakeQuery(
        {
            ("Loss", Split.TRAIN): [4.484403473990304, 3.5, 2.9991],
            ("Loss", Split.VALID): [4.4271, 3.4, 2.8289],
        }
    )
    summary = LearnerSummary.collect(query, ["Loss"], 3)
    assert str(summary) == "\n".join(
        [
            "======================== Learner Summary ========================",
            "Total Epochs: 3",
            "",
            "",
            "| Split | Metric | Min.     | Epoch    | Max.     | Epoch    |",
            "|-------|--------|----------|----------|----------|----------|",
            "| Train | Loss   | 2.999    | 3        | 4.484    | 1        |",
            "| Valid | Loss   | 2.829    | 3        | 4.427    | 1        |",
        ]
    )


def test_small_and_nan_values_and_wide_names() -> None:
    """Values below 0.01 use Rust's exponent form; NaN counts as the largest; columns widen."""
    query = FakeQuery({("Learning Rate", Split.TRAIN): [0.001234, math.nan, 0.5]})
    summary = LearnerSummary.collect(query, ["Learning Rate"], 3, model="M()", stop_reason="why")
    text = str(summary)
    assert "Model:\nM()\nTotal Epochs: 3\nStopped: why" in text
    assert "| Train | Learning Rate | 1.234e-3 | 1        | NaN      | 2        |" in text
    assert "|-------|---------------|" in text


def test_min_is_first_and_max_is_last_on_ties() -> None:
    """Min takes the first minimal epoch, max the last maximal epoch (Burn's rule)."""
    row = MetricSummary.from_values(Split.VALID, "Loss", [(1, 2.0), (2, 1.0), (3, 1.0), (4, 2.0)])
    assert (row.min_epoch, row.max_epoch) == (2, 4)


def test_metrics_without_values_are_left_out() -> None:
    """A metric with no logged epoch gets no row."""
    summary = LearnerSummary.collect(FakeQuery({}), ["Loss"], 2)
    assert summary.metrics == ()


def test_describe_model_counts_parameters() -> None:
    """describe_model is repr(model) with parameter counts per module."""

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l1 = nn.Linear(4, 16)
            self.act = nn.ReLU()
            self.l2 = nn.Linear(16, 1)

    assert describe_model(Mlp()) == "\n".join(
        [
            "Mlp(",
            "  (l1): Linear(in_features=4, out_features=16, bias=True, params: 80)",
            "  (act): ReLU()",
            "  (l2): Linear(in_features=16, out_features=1, bias=True, params: 17)",
            "  params: 97",
            ")",
        ]
    )


class Classifier(LearnerModel):
    """``Linear(3, 3)`` scores with cross-entropy, on ``(x, label)`` items."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 3)

    def classify(self, batch: tuple[torch.Tensor, torch.Tensor]) -> ClassificationOutput:
        x, labels = batch
        scores = self.linear(x)
        return ClassificationOutput(F.cross_entropy(scores, labels), scores, labels)

    def train_step(self, batch: Any) -> TrainOutput[ClassificationOutput]:
        out = self.classify(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Any) -> ClassificationOutput:
        return self.classify(batch)


def test_accuracy_is_in_percent_and_the_table_says_so(tmp_path: Path) -> None:
    """Issue 12, item 11: a torchmetrics user reading "81.944" as a fraction is told: the
    Metric column reads "Accuracy (%)" (summary.json keeps the unit); the value is 100 times
    correct over counted, and the log files keep their names and line format."""
    generator = torch.Generator().manual_seed(3)
    items = [(torch.randn(3, generator=generator), int(i % 3)) for i in range(36)]
    train = DataLoaderBuilder().batch_size(8).build(InMemDataset(items))
    valid = DataLoaderBuilder().batch_size(8).build(InMemDataset(items))
    model = Classifier()
    result = (
        SupervisedTraining(tmp_path, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(AccuracyMetric(), LossMetric())
        .summary()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1)))
    )
    assert result.error is None and result.summary is not None
    with torch.no_grad():
        x = torch.stack([x for x, _ in items])
        correct = int((model.linear(x).argmax(dim=1) == torch.tensor([y for _, y in items])).sum())
    table = str(result.summary).splitlines()
    assert "| Split | Metric       | Min.     | Epoch    | Max.     | Epoch    |" in table
    row = next(line for line in table if line.startswith("| Valid | Accuracy (%) | "))
    assert row == f"| Valid | Accuracy (%) | {format_cell(100 * correct / 36)}| 1        " + (
        f"| {format_cell(100 * correct / 36)}| 1        |"
    )
    written = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    accuracy = next(
        r for r in written["metrics"] if r["name"] == "Accuracy" and r["split"] == "Valid"
    )
    assert accuracy["unit"] == "%" and accuracy["max_value"] == 100 * correct / 36
    assert LearnerSummary.from_json(written) == result.summary
    lines = (tmp_path / "valid" / "epoch-1" / "Accuracy.log").read_text().splitlines()
    assert lines[-1].endswith(",final")


def test_accuracy_has_one_label_in_every_table_and_line(tmp_path: Path) -> None:
    """The training table said "Accuracy (%)" and the evaluation table "Accuracy": every table
    (training, evaluation, ember compare, ember summary from the logs) and every renderer line
    says "Accuracy (%)"."""
    generator = torch.Generator().manual_seed(3)
    items = [(torch.randn(3, generator=generator), int(i % 3)) for i in range(36)]
    loader = DataLoaderBuilder().batch_size(8)
    model = Classifier()
    stream = io.StringIO()
    result = (
        SupervisedTraining(
            tmp_path, loader.build(InMemDataset(items)), loader.build(InMemDataset(items))
        )
        .renderer(CliMetricsRenderer(stream, interval=0))
        .metrics(AccuracyMetric(), LossMetric())
        .with_test("test", loader.build(InMemDataset(items)), checkpoint=None)
        .summary()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1)))
    )
    assert result.error is None and result.evaluation is not None
    (tmp_path / "summary.json").unlink()  # ember summary reads the logs then
    texts = {
        "training": str(result.summary),
        "evaluation": str(result.evaluation),
        "compare": compare([load(tmp_path)]),
        "summary from the logs": str(load(tmp_path).summary_from_logs()),
        "renderer": stream.getvalue(),
    }
    for where, text in texts.items():
        assert "Accuracy (%)" in text, where
        assert text.count("Accuracy") == text.count("Accuracy (%)"), where
    assert "| test | Accuracy (%) | " in texts["evaluation"]
    assert "Valid Accuracy (%) (higher is better)" in texts["compare"]
    assert "| Train | Accuracy (%) | " in texts["summary from the logs"]
    assert "Split ended: valid  Accuracy (%) " in texts["renderer"]
    assert "Test ended.  Accuracy (%) " in texts["renderer"]
