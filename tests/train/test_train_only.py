"""``SupervisedTraining(directory, train)``: a run without a valid loader trains only (issue 12,
item 7): no valid split, no valid metrics, and what reads a validation value refused."""

from __future__ import annotations

import copy
import io
from functools import partial
from pathlib import Path

import pytest
import torch

from ember.train import (
    CliMetricsRenderer,
    Direction,
    Learner,
    LossMetric,
    MetricCheckpointingStrategy,
    MetricEarlyStoppingStrategy,
    Split,
    StoppingCondition,
    SupervisedTraining,
    TorchLrScheduler,
)
from tests.train.fixtures import TinyRegressor, loader

NO_VALID = (
    "needs a validation split, and this run has none: SupervisedTraining(directory, train) "
    "trains only; give it a valid loader, SupervisedTraining(directory, train, valid), or read "
    "a train metric (split=Split.TRAIN)"
)


def learner(model: TinyRegressor | None = None) -> Learner[TinyRegressor]:
    return Learner(model or TinyRegressor(), partial(torch.optim.SGD, lr=0.05))


def test_a_run_without_a_valid_loader_trains_only(tmp_path: Path) -> None:
    """Two epochs of training: no valid split on screen or on disk, the summary's train rows,
    the last two epochs checkpointed (no valid Loss to keep the best of); the weights are those
    of a run with validation, which never changes them."""
    stream = io.StringIO()
    model = TinyRegressor()
    start = copy.deepcopy(model)
    result = (
        SupervisedTraining(tmp_path / "only", loader(16))
        .renderer(CliMetricsRenderer(stream))
        .metrics(LossMetric())
        .num_epochs(3)
        .summary()
        .with_default_checkpointers()
        .launch(learner(model))
    )
    assert result.error is None
    assert result.last_epoch == 3
    assert "Starting split 'valid'" not in stream.getvalue()
    assert stream.getvalue().count("Split ended: train") == 3
    assert not (tmp_path / "only" / "valid").exists()
    assert (tmp_path / "only" / "train" / "epoch-3" / "Loss.log").exists()
    assert result.summary is not None
    assert [(row.split, row.name) for row in result.summary.metrics] == [("Train", "Loss")]
    assert sorted(result.checkpoints) == [2, 3]
    validated = copy.deepcopy(start)
    reference = SupervisedTraining(tmp_path / "both", loader(16), loader(8)).num_epochs(3)
    reference = reference.renderer(CliMetricsRenderer(io.StringIO()))
    assert reference.launch(learner(validated)).error is None
    assert torch.equal(validated.linear.weight, model.linear.weight)  # type: ignore[arg-type]
    assert model.training is False  # eval mode, as after any run


def test_a_valid_metric_without_a_valid_loader_is_refused_at_the_call(tmp_path: Path) -> None:
    training = SupervisedTraining(tmp_path, loader(8))
    with pytest.raises(ValueError, match="no valid loader") as raised:
        training.metric_valid_numeric(LossMetric())
    assert str(raised.value) == (
        "LossMetric is registered on the valid split, and this run has no valid loader "
        "(SupervisedTraining(directory, train) trains only): give one, "
        "SupervisedTraining(directory, train, valid), or register it with "
        "metric_train_numeric/metric_train"
    )


def test_what_reads_a_validation_value_is_refused_at_launch(tmp_path: Path) -> None:
    """Early stopping and metric checkpointing on a valid metric, ReduceLROnPlateau: refused
    before any training, naming the fix."""
    stopping = MetricEarlyStoppingStrategy(
        "Loss", Direction.LOWEST, Split.VALID, StoppingCondition.no_improvement_since(2)
    )

    def training() -> SupervisedTraining:  # a builder is configured in place: one per case
        return SupervisedTraining(tmp_path, loader(8)).metrics(LossMetric())

    with pytest.raises(ValueError, match="needs a validation split") as raised:
        training().early_stopping(stopping).launch(learner())
    assert str(raised.value) == f"early stopping on the valid metric 'Loss' {NO_VALID}"
    best = MetricCheckpointingStrategy("Loss", Direction.LOWEST, Split.VALID)
    with pytest.raises(ValueError, match="the checkpointing strategy on the valid metric 'Loss'"):
        training().with_default_checkpointers().with_checkpointing_strategy(best).launch(learner())
    model = TinyRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plateau = TorchLrScheduler(
        torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer), monitor="Loss"
    )
    with pytest.raises(ValueError, match="needs a validation split") as raised:
        training().launch(Learner(model, optimizer, plateau))
    assert str(raised.value).startswith(
        f"the scheduler stepped with the validation metric 'Loss' {NO_VALID}"
    )
    assert not list(tmp_path.rglob("*.log"))  # nothing trained, nothing written
    on_train = MetricEarlyStoppingStrategy(
        "Loss", Direction.LOWEST, Split.TRAIN, StoppingCondition.no_improvement_since(2)
    )
    result = training().early_stopping(on_train).renderer(CliMetricsRenderer(io.StringIO()))
    assert result.launch(learner()).error is None  # a train metric is fine
