"""Reading a run back from its ``LearningResult``: the logged values, and ``last_epoch``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from ember._rundir.metric_logs import epoch_value
from ember.extend import NumericEntry
from ember.train import (
    CliMetricsRenderer,
    InMemoryMetricLogger,
    Learner,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
)
from tests.train.fixtures import Batch, TinyRegressor, loader, read_lines


def training(run_dir: Path, epochs: int = 3) -> SupervisedTraining:
    return (
        SupervisedTraining(run_dir, loader(8), loader(4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .summary()
    )


def learner(model: TinyRegressor) -> Learner[TinyRegressor]:
    return Learner(model, torch.optim.SGD(model.parameters()), 0.1)


def logged(path: Path) -> float:
    entries = [NumericEntry.parse(line) for line in read_lines(path)]
    value = epoch_value(entries)
    assert value is not None
    return value


def test_values_gives_each_epochs_logged_value_without_parsing_files(
    model: TinyRegressor, run_dir: Path
) -> None:
    """The user's need: the per-epoch curve of a metric, without reading the log files."""
    result = training(run_dir).launch(learner(model))
    for split in ("train", "valid"):
        expected = {e: logged(run_dir / split / f"epoch-{e}" / "Loss.log") for e in (1, 2, 3)}
        assert result.values(split, "Loss") == expected
    assert result.summary is not None
    row = next(r for r in result.summary.metrics if r.split == "Valid")
    assert row.min_value == min(result.values("valid", "Loss").values())


def test_values_of_a_metric_nobody_registered_names_the_registered_ones(
    model: TinyRegressor, run_dir: Path
) -> None:
    """The user's mistake: asking for "loss" where the metric is "Loss"."""
    result = training(run_dir, epochs=1).launch(learner(model))
    with pytest.raises(ValueError, match="no metric 'loss'") as raised:
        result.values("valid", "loss")
    assert str(raised.value) == (
        "no metric 'loss' was registered on the valid split (registered there: ['Loss']); "
        "pass one of those names"
    )
    with pytest.raises(ValueError, match="split must be 'train' or 'valid', got 'validation'"):
        result.values("validation", "Loss")


def test_values_read_from_a_logger_that_reads_back_without_file_logs(
    model: TinyRegressor, run_dir: Path
) -> None:
    memory = InMemoryMetricLogger()
    result = (
        training(run_dir, epochs=2)
        .without_file_logs()
        .with_metric_logger(memory)
        .launch(learner(model))
    )
    assert sorted(result.values("train", "Loss")) == [1, 2]


def test_a_stop_inside_an_epoch_does_not_count_it_and_the_summary_agrees(
    model: TinyRegressor, run_dir: Path
) -> None:
    """Stopped during epoch 2's training: last_epoch is 1 (epoch 2 not completed, though its
    partial log is on disk); the summary's Total Epochs and values() say the same."""
    builder = training(run_dir)
    interrupter = builder.interrupter()
    calls = 0

    def stop_in_epoch_2(batch: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            interrupter.stop("stopped by the user")

    model.on_train_step = stop_in_epoch_2
    result = builder.launch(learner(model))
    assert result.last_epoch == 1 and result.stop_reason == "stopped by the user"
    assert (run_dir / "train" / "epoch-2" / "Loss.log").is_file()  # partial, not counted
    assert result.summary is not None and result.summary.epochs == 1
    assert "Total Epochs: 1" in str(result.summary)
    assert list(result.values("train", "Loss")) == [1]
    assert all(row.max_epoch == 1 for row in result.summary.metrics)


def test_a_stop_during_validation_keeps_the_epoch(run_dir: Path) -> None:
    """Stopped during epoch 1's validation: its training is complete (and checkpointed), so
    the epoch counts, in last_epoch and in the summary."""
    builder = training(run_dir)
    interrupter = builder.interrupter()

    class StopInValid(TinyRegressor):
        def inference_step(self, batch: Batch) -> RegressionOutput:
            interrupter.stop("stopped in valid")
            return super().inference_step(batch)

    torch.manual_seed(0)
    result = builder.launch(learner(StopInValid()))
    assert result.last_epoch == 1 and result.stop_reason == "stopped in valid"
    assert result.summary is not None and result.summary.epochs == 1
