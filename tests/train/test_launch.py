"""Launching a run: Start and End around the epochs, errors in the result, logs and summary."""

from __future__ import annotations

import io
import logging
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.extend import MetricEntry, MetricMetadata
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from tests.train.fixtures import Batch, TinyRegressor, loader, quiet, read_lines


def test_launch_sends_start_and_end_around_fit(model: TinyRegressor, run_dir: Path) -> None:
    """launch wraps the epochs in Start(total, 1) and End(summary), seen by the renderer."""
    calls: list[str] = []

    class Recorder(CliMetricsRenderer):
        def start(self, total_epochs: int, starting_epoch: int) -> None:
            calls.append(f"start {total_epochs} {starting_epoch}")

        def end(self) -> None:
            calls.append("end")

        def on_train_end(self, summary: Any) -> None:
            calls.append(f"summary {summary is not None}")

    result = (
        SupervisedTraining(run_dir, loader(8), loader(4))
        .renderer(Recorder(io.StringIO()))
        .metric_train_numeric(LossMetric())
        .num_epochs(2)
        .summary()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None
    assert calls == ["start 2 1", "end", "summary True"]


def test_step_error_lands_in_result_with_logs_intact(model: TinyRegressor, run_dir: Path) -> None:
    """An exception in train_step ends training; it is in result.error with its traceback."""
    calls = 0

    def explode(batch: Batch) -> None:
        nonlocal calls
        calls += 1
        if calls == 5:  # epoch 2, batch 2
            raise RuntimeError("boom in step")

    model.on_train_step = explode
    stream = io.StringIO()
    result = (
        SupervisedTraining(run_dir, loader(12, 4), loader(4, 4))
        .renderer(CliMetricsRenderer(stream))
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(3)
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, RuntimeError)
    assert "boom in step" in str(result.error)
    assert result.traceback is not None and "explode" in result.traceback
    assert not result.succeeded
    epoch1 = read_lines(run_dir / "train" / "epoch-1" / "Loss.log")
    assert len(epoch1) == 4 and epoch1[-1].endswith(",final")
    assert len(read_lines(run_dir / "train" / "epoch-2" / "Loss.log")) == 1
    assert "boom in step" in (run_dir / "experiment.log").read_text()
    assert "Training failed: RuntimeError: boom in step" in stream.getvalue()
    assert not any(t.name == "train-worker" for t in threading.enumerate())


def test_metric_error_on_worker_stops_training(model: TinyRegressor, run_dir: Path) -> None:
    """An exception in a metric (on train-worker) stops training and reaches result.error."""

    class Failing(LossMetric):
        def update(self, item: Any, metadata: MetricMetadata) -> MetricEntry:
            if metadata.iteration == 2:
                raise ZeroDivisionError("metric broke")
            return super().update(item, metadata)

    steps = 0

    def count(batch: Batch) -> None:
        nonlocal steps
        steps += 1

    model.on_train_step = count
    result = (
        quiet(run_dir, loader(400, 4), loader(4, 4))
        .metric_train_numeric(Failing())
        .num_epochs(5)
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, ZeroDivisionError)
    assert steps < 500  # stopped well before the 5 x 100 batches


def test_dataset_error_lands_in_result(model: TinyRegressor, run_dir: Path) -> None:
    """An exception raised by a dataset on a loader thread reaches result.error as itself."""
    from ember.data import DataLoaderBuilder, MapperDataset
    from tests.train.fixtures import batcher, samples

    def broken(item: Any) -> Any:
        if item[1] > 1e9 or broken.count >= 6:  # type: ignore[attr-defined]
            raise KeyError("bad item")
        broken.count += 1  # type: ignore[attr-defined]
        return item

    broken.count = 0  # type: ignore[attr-defined]
    train = (
        DataLoaderBuilder(batcher)
        .batch_size(2)
        .num_workers(2)
        .build(MapperDataset(samples(20), broken))
    )
    result = (
        quiet(run_dir, train, loader(4))
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, KeyError)


def test_experiment_log_has_epoch_lines_and_handler_is_removed(
    model: TinyRegressor, run_dir: Path
) -> None:
    """experiment.log gets the epoch lines; the handler is gone after launch."""
    before = list(logging.getLogger("ember").handlers)
    quiet(run_dir, loader(8), loader(4)).num_epochs(2).launch(
        Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    )
    text = (run_dir / "experiment.log").read_text()
    for name in ("training", "validation"):
        single = re.findall(rf"Executing {name} step for epoch (\d+)$", text, re.M)
        spans = re.findall(rf"Executing {name} steps for epochs (\d+)-(\d+)$", text, re.M)
        epochs = [int(e) for e in single]
        epochs += [e for first, last in spans for e in range(int(first), int(last) + 1)]
        assert sorted(epochs) == [1, 2], name
    assert logging.getLogger("ember").handlers == before


def test_no_application_log_when_disabled(model: TinyRegressor, run_dir: Path) -> None:
    """with_application_logger(None) writes no experiment.log."""
    quiet(run_dir, loader(8), loader(4)).with_application_logger(None).launch(
        Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    )
    assert not (run_dir / "experiment.log").exists()


def test_summary_json_and_table(model: TinyRegressor, run_dir: Path) -> None:
    """summary() prints the table and writes summary.json with the same rows."""
    from ember.train import LearnerSummary

    stream = io.StringIO()
    result = (
        SupervisedTraining(run_dir, loader(16), loader(8))
        .renderer(CliMetricsRenderer(stream))
        .metrics(LossMetric())
        .num_epochs(3)
        .summary()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.05))
    )
    assert result.summary is not None
    assert str(result.summary) in stream.getvalue()
    import json

    loaded = LearnerSummary.from_json(json.loads((run_dir / "summary.json").read_text()))
    assert loaded == result.summary
    assert [(row.split, row.name) for row in loaded.metrics] == [
        ("Train", "Loss"),
        ("Valid", "Loss"),
    ]
    assert "(linear): Linear(in_features=3, out_features=1, bias=True, params: 4)" in str(loaded)


def test_optimizer_factory_is_built_after_the_move(model: TinyRegressor, run_dir: Path) -> None:
    """An optimizer factory is called with the parameters and used for training."""
    built: list[torch.optim.Optimizer] = []

    def factory(params: Any) -> torch.optim.Optimizer:
        optim = torch.optim.SGD(params, lr=1.0)
        built.append(optim)
        return optim

    weight = model.linear.get_parameter("weight")
    before = weight.detach().clone()
    learner = Learner(model, factory, 0.1)
    result = quiet(run_dir, loader(8), loader(4)).launch(learner)
    assert result.error is None and len(built) == 1 and learner.optimizer is built[0]
    assert not torch.equal(before, weight)


def test_a_metric_nobody_registered_is_refused_at_launch(tmp_path: Path) -> None:
    """Early stopping on "Acuracy" or a checkpointing strategy on a metric not on the valid
    split: refused before training, naming the metric, the split and the registered names."""
    from ember.train import ComposedCheckpointingStrategy as Composed
    from ember.train import (
        KeepLastNCheckpoints,
        MetricCheckpointingStrategy,
        MetricEarlyStoppingStrategy,
    )

    def builder() -> SupervisedTraining:
        return SupervisedTraining(tmp_path / "run", loader(4), loader(4)).metrics(LossMetric())

    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    with pytest.raises(ValueError, match=r"early stopping reads the metric 'Acuracy' on the valid"):
        builder().early_stopping(MetricEarlyStoppingStrategy("Acuracy")).launch(learner)
    strategy = Composed([KeepLastNCheckpoints(1), MetricCheckpointingStrategy("Accuracy")])
    with pytest.raises(ValueError, match=r"'Accuracy' .* \(registered: \['Loss'\]\)"):
        builder().with_default_checkpointers().with_checkpointing_strategy(strategy).launch(learner)
    assert not (tmp_path / "run").exists()
