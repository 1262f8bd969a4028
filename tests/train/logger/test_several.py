"""Several metric loggers at once in a real training run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from ember._rundir.metric_logs import epoch_value
from ember.train import (
    CliMetricsRenderer,
    CsvMetricLogger,
    FileMetricLogger,
    InMemoryMetricLogger,
    Learner,
    LearningRateMetric,
    LossMetric,
    MetricEarlyStoppingStrategy,
    Split,
    StoppingCondition,
    SupervisedTraining,
    TensorBoardLogger,
)
from tests.train.fixtures import TinyRegressor, loader

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

EPOCHS = 3
TRAIN_BATCHES = 3  # 10 items, batch 4
VALID_BATCHES = 2  # 6 items, batch 4


def test_tensorboard_csv_and_memory_loggers_together(model: TinyRegressor, tmp_path: Path) -> None:
    """Every logger gets every value, beside the file logs that stay (extra loggers add to
    them); TensorBoard's steps are the run's global steps."""
    run_dir, tb_dir, csv_path = tmp_path / "run", tmp_path / "tb", tmp_path / "metrics.csv"
    memory = InMemoryMetricLogger()
    stream = io.StringIO()
    result = (
        SupervisedTraining(run_dir, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .metric_train_numeric(LearningRateMetric())
        .num_epochs(EPOCHS)
        .early_stopping(
            MetricEarlyStoppingStrategy(LossMetric(), condition=StoppingCondition(EPOCHS))
        )
        .with_metric_logger(TensorBoardLogger(tb_dir))
        .with_metric_logger(CsvMetricLogger(csv_path))
        .with_metric_logger(memory)
        .renderer(CliMetricsRenderer(stream))
        .summary()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=1e-2), 1e-2))
    )
    assert result.error is None, result.traceback
    assert result.last_epoch == EPOCHS
    files = FileMetricLogger(run_dir)  # the file logs are still written

    csv = CsvMetricLogger(csv_path)  # a fresh reader of the file the run wrote
    for split in (Split.TRAIN, Split.VALID):
        for epoch in range(1, EPOCHS + 1):
            logged = memory.read_numeric("Loss", epoch, split)
            assert len(logged) == (TRAIN_BATCHES if split is Split.TRAIN else VALID_BATCHES) + 1
            assert logged[-1].final
            assert csv.read_numeric("Loss", epoch, split) == logged
            assert files.read_numeric("Loss", epoch, split) == logged

    # the summary read the file logs (TensorBoard answers nothing)
    assert result.summary is not None
    rows = {(row.split, row.name): row for row in result.summary.metrics}
    assert set(rows) == {("Train", "Loss"), ("Train", "Learning Rate"), ("Valid", "Loss")}
    valid = [epoch_value(memory.read_numeric("Loss", e, Split.VALID)) for e in (1, 2, 3)]
    assert rows[("Valid", "Loss")].min_value == min(v for v in valid if v is not None)
    assert "Learner Summary" in stream.getvalue()

    accumulator = event_accumulator.EventAccumulator(str(tb_dir))
    accumulator.Reload()
    steps = {
        tag: [event.step for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }
    assert steps["train/Loss"] == list(range(1, EPOCHS * TRAIN_BATCHES + 1))
    # the valid epoch value at the step it followed: the end of each epoch's training
    assert steps["valid/Loss"] == [TRAIN_BATCHES * epoch for epoch in range(1, EPOCHS + 1)]
    assert steps["train/Learning Rate"] == list(range(1, EPOCHS * TRAIN_BATCHES + 1))
    assert steps["train/Loss/epoch"] == steps["valid/Loss/epoch"] == [1, 2, 3]
    final = accumulator.Scalars("valid/Loss/epoch")[-1].value
    last = valid[-1]
    assert last is not None
    assert abs(final - last) <= 1e-6 * abs(last)  # stored as float32
