"""A failed training stops the script: ``launch`` raises ``TrainingError`` once the run is
finished; ``errors_in_result()`` keeps Burn's way (the error in the result)."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember import EmberError, NonFiniteLossError, TrainingError
from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from tests.train.fixtures import Batch, TinyRegressor, loader, read_lines


def failing(model: TinyRegressor, at: int) -> None:
    calls = 0

    def explode(batch: Batch) -> None:
        nonlocal calls
        calls += 1
        if calls == at:
            raise RuntimeError("boom in step")

    model.on_train_step = explode


def training(run_dir: Path, stream: io.StringIO) -> SupervisedTraining:
    return (
        SupervisedTraining(run_dir, loader(8, 4), loader(4, 4))
        .renderer(CliMetricsRenderer(stream))
        .metrics(LossMetric())
        .num_epochs(3)
        .with_default_checkpointers()
    )


def test_a_script_that_ignores_the_result_stops_on_a_failed_training(
    model: TinyRegressor, run_dir: Path
) -> None:
    """The user's mistake: not reading result.error, so CI passed on an untrained model. Now
    launch raises, chained to the step's error, after the run was finished as before."""
    failing(model, at=4)  # epoch 2, batch 2
    stream = io.StringIO()
    with pytest.raises(TrainingError) as raised:
        training(run_dir, stream).launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    error = raised.value
    assert isinstance(error, EmberError)
    assert isinstance(error.__cause__, RuntimeError) and str(error.__cause__) == "boom in step"
    message = str(error)
    assert "training failed after 1 complete epoch(s): RuntimeError: boom in step" in message
    assert str(run_dir / "experiment.log") in message
    assert "errors_in_result()" in message and "`.result`" in message
    result = error.result
    assert result.error is error.__cause__ and result.last_epoch == 1
    assert result.checkpoints.keys() == {1}  # written before raising
    assert read_lines(run_dir / "train" / "epoch-1" / "Loss.log")[-1].endswith(",final")
    assert "boom in step" in (run_dir / "experiment.log").read_text()
    assert "Training failed: RuntimeError: boom in step" in stream.getvalue()
    assert not model.training  # restored to eval mode, as the result always was
    assert not any(t.name in ("train-worker", "metric-writer") for t in threading.enumerate())


def test_errors_in_result_returns_the_error_as_burn_does(
    model: TinyRegressor, run_dir: Path
) -> None:
    failing(model, at=1)
    result = (
        training(run_dir, io.StringIO())
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, RuntimeError) and not result.succeeded
    assert result.traceback is not None and "explode" in result.traceback


def test_an_interrupt_is_not_an_error(model: TinyRegressor, run_dir: Path) -> None:
    """A user's stop (the interrupter, as Ctrl-C does) returns a result with a stop reason."""
    builder = training(run_dir, io.StringIO())
    interrupter = builder.interrupter()
    model.on_train_step = lambda batch: interrupter.stop("stopped by the user")
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert result.error is None and result.stop_reason == "stopped by the user"


def test_a_loss_gone_nan_at_epoch_1_counts_no_complete_epoch(run_dir: Path) -> None:
    """A loss that goes NaN at epoch 1, iteration 2 of a 2-epoch run: 0 complete epochs, not 2
    (the metrics thread, which finds it, may be behind the loop)."""
    calls = 0

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        nonlocal calls
        calls += 1
        value = F.mse_loss(output, target)
        return value * float("nan") if calls == 2 else value

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    items = [(torch.randn(3), torch.randn(1)) for _ in range(64)]
    train = DataLoaderBuilder().batch_size(8).build(InMemDataset(items))
    with pytest.raises(TrainingError) as raised:
        (
            SupervisedTraining(run_dir, train)
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metrics(LossMetric())
            .num_epochs(2)
            .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=loss))
        )
    assert isinstance(raised.value.__cause__, NonFiniteLossError)
    assert "at epoch 1, iteration 2" in str(raised.value.__cause__)
    assert "training failed after 0 complete epoch(s)" in str(raised.value)
    assert raised.value.result.last_epoch == 0
