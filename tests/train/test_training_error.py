"""A failed training stops the script: ``launch`` raises ``TrainingError`` once the run is
finished; ``errors_in_result()`` keeps Burn's way (the error in the result)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
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
    assert message.startswith(
        "training failed after 1 complete epoch(s), with the RuntimeError this error is raised "
        "from."
    )
    assert "boom in step" not in message  # its traceback, printed above this one, says it
    assert error.__cause__.__notes__ == [f"ember: the traceback is in {run_dir / 'experiment.log'}"]
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


SCRIPT = """
import sys, torch, torch.nn.functional as F
from torch import nn
from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import Learner, LossMetric, SupervisedTraining

class Exploding(nn.Linear):
    def forward(self, x):
        raise RuntimeError(f"the batch exploded at row {x.shape[0] * 2 + 1}")  # row 17

model = Exploding(3, 1)
data = [(torch.randn(3), torch.randn(1)) for _ in range(16)]
train = DataLoaderBuilder().batch_size(8).build(InMemDataset(data))
SupervisedTraining(sys.argv[1], train).metrics(LossMetric()).launch(
    Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.mse_loss)
)
"""


def test_a_failing_script_shows_the_failure_once_with_where_the_log_is(tmp_path: Path) -> None:
    """A user's script whose training fails: the screen (stdout and stderr) shows the error once
    on the renderer's line and once at the end of its one traceback, not three or four times;
    the run's log is named, and TrainingError does not repeat the error's text."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "EMBER_RENDERER": "cli"},
    )
    assert done.returncode == 1
    screen = done.stdout + done.stderr
    assert screen.count("the batch exploded at row 17") == 2, screen
    log = tmp_path / "run" / "experiment.log"
    line = (
        "Training failed: RuntimeError: the batch exploded at row 17 "
        f"(ember: the traceback is in {log})"
    )
    assert done.stdout.count(line) == 1
    assert "Traceback" not in done.stdout  # the renderer prints no traceback
    assert done.stderr.count("raise RuntimeError(") == 1  # the error's traceback, once
    assert "RuntimeError: the batch exploded at row 17\nember: the traceback is in" in done.stderr
    assert (
        done.stderr.rstrip()
        .splitlines()[-1]
        .startswith(
            "ember._errors.TrainingError: training failed after 0 complete epoch(s), with the "
            "RuntimeError this error is raised from."
        )
    )
    assert "the batch exploded at row 17" in log.read_text(encoding="utf-8")
