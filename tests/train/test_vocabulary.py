"""Splits and directions are taken as members or as their values (``"valid"``, ``"lowest"``)
everywhere a user names one, with one message for anything else."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from ember.train import (
    CliMetricsRenderer,
    Direction,
    FileMetricLogger,
    InMemoryMetricLogger,
    Learner,
    LossMetric,
    MetricCheckpointingStrategy,
    MetricEarlyStoppingStrategy,
    Split,
    SupervisedTraining,
)
from tests.train.fixtures import TinyRegressor, loader


def test_a_split_and_a_direction_written_as_strings_train_as_the_members_do(
    tmp_path: Path,
) -> None:
    """Issue 29, item 10: MetricCheckpointingStrategy and MetricEarlyStoppingStrategy refused
    split="valid" (TypeError) though LearningResult.values took it; both take the strings now,
    and a run configured so keeps the same best epoch and stops where the members make it."""
    results = []
    for direction, split in (("lowest", "valid"), (Direction.LOWEST, Split.VALID)):
        checkpointing = MetricCheckpointingStrategy("Loss", direction, split)
        stopping = MetricEarlyStoppingStrategy("Loss", direction, split)
        assert (checkpointing.split, stopping.split) == (Split.VALID, Split.VALID)
        assert (checkpointing.direction, stopping.direction) == (Direction.LOWEST,) * 2
        torch.manual_seed(0)
        model = TinyRegressor()
        memory = InMemoryMetricLogger()
        result = (
            SupervisedTraining(tmp_path / str(split), loader(16, 4, shuffle=1), loader(8))
            .metrics(LossMetric())
            .renderer(CliMetricsRenderer(io.StringIO()))
            .with_default_checkpointers()
            .with_checkpointing_strategy(checkpointing)
            .early_stopping(stopping)
            .with_metric_logger(memory)
            .num_epochs(4)
            .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.5), 0.5))
        )
        assert result.error is None, result.traceback
        files = FileMetricLogger(tmp_path / str(split))
        assert files.read_numeric("Loss", 1, "valid") == files.read_numeric("Loss", 1, Split.VALID)
        assert memory.read_numeric("Loss", 1, "valid") == files.read_numeric("Loss", 1, "valid")
        assert files.path("Loss", 1, "train") == files.path("Loss", 1, Split.TRAIN)
        files.close()
        results.append((result.best_epoch, result.last_epoch, result.values("valid", "Loss")))
    assert results[0] == results[1]
    assert len(results[0][2]) >= 1


def test_anything_else_is_named_with_the_choices(tmp_path: Path) -> None:
    """A misspelt split or direction is a ValueError listing the choices; another type a
    TypeError; the run's result takes only its own splits."""
    with pytest.raises(ValueError, match="split must be one of 'train', 'valid', 'test', got 'va"):
        MetricCheckpointingStrategy("Loss", split="validation")
    with pytest.raises(ValueError, match="direction must be one of 'lowest', 'highest', got 'min'"):
        MetricEarlyStoppingStrategy("Loss", direction="min")
    with pytest.raises(TypeError, match=r"split must be a Split or one of .*got 1 \(int\)"):
        FileMetricLogger(tmp_path).read_numeric("Loss", 1, 1)  # type: ignore[arg-type]
