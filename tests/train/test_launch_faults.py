"""How a run ends under faults: the error in the result, nothing escaping ``launch``, no thread
left, no bad checkpoint on disk (each test is one fault a reliability audit found)."""

from __future__ import annotations

import contextlib
import copy
import errno
import io
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from ember import CheckpointError, NonFiniteLossError
from ember.train import (
    CliMetricsRenderer,
    FileMetricLogger,
    Learner,
    LossMetric,
    SupervisedTraining,
    TrainOutput,
    current_step,
)
from tests.train.fixtures import (
    Batch,
    TinyRegressor,
    ember_threads,
    loader,
    metric_writer_processes,
    read_only_directory,
    weight,
)

pytestmark = pytest.mark.timeout(120)  # a hang fails the test, never the suite


def quiet(directory: Path, renderer: Any = None) -> SupervisedTraining:
    builder = SupervisedTraining(directory, loader(8, 4), loader(4, 4))
    return builder.renderer(renderer or CliMetricsRenderer(io.StringIO()))


class NanGradientAt(TinyRegressor):
    """A finite loss whose gradients are NaN at one (epoch, iteration): ``0 * sqrt(0)``."""

    def __init__(self, epoch: int, iteration: int) -> None:
        super().__init__()
        self.at = (epoch, iteration)

    def train_step(self, batch: Batch) -> TrainOutput[Any]:
        out = self.regression(batch)
        step = current_step()
        assert step is not None
        loss = out.loss
        if (step.epoch, step.iteration) == self.at:
            total = weight(self).sum()
            loss = loss + 0 * torch.sqrt(total - total.detach())  # value 0, gradient NaN
        return TrainOutput.from_loss(self, loss, type(out)(loss, out.output, out.targets))


def test_nan_gradient_with_finite_loss_is_never_checkpointed(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """The last step of epoch 2 has NaN gradients and a finite loss: epoch 2 is refused, naming
    the tensor, and only epoch 1's finite checkpoint is on disk."""
    torch.manual_seed(0)
    model = NanGradientAt(2, 2)
    run = tmp_path / "run"
    result = (
        quiet(run)
        .metric_train_numeric(LossMetric())
        .num_epochs(2)
        .with_default_checkpointers()
        .errors_in_result()
        .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    )
    assert isinstance(result.error, CheckpointError)
    assert "checkpoint model-2.safetensors holds a non-finite value in tensor 'linear.weight'" in (
        str(result.error)
    )
    checkpoints = run / "checkpoint"
    assert not (checkpoints / "manifest-2.json").exists()
    assert not list(checkpoints.glob("*-2.safetensors"))
    assert json.loads((checkpoints / "manifest-1.json").read_text())["epoch"] == 1
    for path in checkpoints.glob("*.safetensors"):
        for name, tensor in load_file(path).items():
            assert not tensor.is_floating_point() or torch.isfinite(tensor).all(), (path, name)
    assert ember_threads(since=threads_before) == []


def test_full_disk_under_experiment_log_is_the_result_error(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """experiment.log on a full device (``/dev/full``: every flush fails with ENOSPC): training
    and its shutdown complete, the checkpoints are written, the error is in the result."""
    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (a device that is always full)")
    model = TinyRegressor()
    run = tmp_path / "run"
    result = (
        quiet(run)
        .num_epochs(2)
        .with_default_checkpointers()
        .with_application_logger("/dev/full")
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
    )
    assert isinstance(result.error, OSError)
    assert result.error.errno == errno.ENOSPC
    assert "No space left on device" in str(result.error)
    assert result.last_epoch == 2
    assert (run / "checkpoint" / "manifest-2.json").exists()
    assert ember_threads(since=threads_before) == []


class FailingRenderer(CliMetricsRenderer):
    """A renderer whose ``on_error`` or ``end`` raises."""

    def __init__(self, fail_in: str) -> None:
        super().__init__(io.StringIO())
        self.fail_in = fail_in
        self.closed = False

    def on_error(self, error: BaseException) -> None:
        if self.fail_in == "on_error":
            raise RuntimeError("the renderer's on_error broke")
        super().on_error(error)

    def end(self) -> None:
        if self.fail_in == "end":
            raise RuntimeError("the renderer's end broke")
        super().end()

    def close(self) -> None:
        self.closed = True
        super().close()


def test_renderer_on_error_that_raises_is_a_note_and_everything_closes(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """A step fails, then the renderer's on_error raises: the step's error is the result's,
    the renderer's is a note on it, the renderer and the loggers are still closed."""
    model = TinyRegressor()

    def fail(batch: Batch) -> None:
        raise ValueError("the step broke")

    model.on_train_step = fail
    renderer = FailingRenderer("on_error")
    result = (
        quiet(tmp_path / "run", renderer)
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
    )
    assert isinstance(result.error, ValueError)
    assert str(result.error) == "the step broke"
    assert any("RuntimeError: the renderer's on_error broke" in n for n in result.error.__notes__)
    assert renderer.closed
    assert ember_threads(since=threads_before) == []


def test_renderer_end_that_raises_is_the_result_error(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """The renderer's end() raising is the run's error, not only a line in experiment.log."""
    model = TinyRegressor()
    renderer = FailingRenderer("end")
    result = (
        quiet(tmp_path / "run", renderer)
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
    )
    assert isinstance(result.error, RuntimeError)
    assert str(result.error) == "the renderer's end broke"
    assert renderer.closed
    assert ember_threads(since=threads_before) == []


@pytest.mark.parametrize("fault", ["read-only", "a file where a directory belongs"])
def test_metric_logger_that_cannot_write_stops_training(
    tmp_path: Path, fault: str, threads_before: set[threading.Thread]
) -> None:
    """The metric-log directory cannot be written (no checkpointers): training stops at the
    metrics thread's next chunk with the write error, not after all 40 epochs, and
    metric-writer is stopped."""
    logs = tmp_path / "logs"
    if fault == "read-only":
        context: Any = read_only_directory(logs)
    else:
        logs.mkdir()
        (logs / "train").write_text("not a directory")
        context = contextlib.nullcontext(logs)
    model = TinyRegressor()
    builder = SupervisedTraining(tmp_path / "run", loader(400, 4), loader(4, 4))
    builder = builder.renderer(CliMetricsRenderer(io.StringIO()))  # 100 batches an epoch
    with context:
        result = (
            builder.metric_train_numeric(LossMetric())
            .with_metric_logger(FileMetricLogger(logs, interval=0.0))
            .num_epochs(40)
            .errors_in_result()
            .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
        )
        assert isinstance(result.error, OSError)
        assert result.error.errno in (errno.EROFS, errno.EACCES, errno.ENOTDIR)
        assert str(logs / "train") in str(result.error)
        assert result.stop_reason is not None
        assert result.stop_reason.startswith("metrics thread failed: ")
        assert result.last_epoch < 20  # the first blocks fail: it stops within an epoch or so
        assert ember_threads(since=threads_before) == []


def test_a_stopped_metric_writer_ends_the_run_within_its_timeout_naming_it(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """The metric-writer is stopped (SIGSTOP, as a hung NFS mount leaves it) mid-run: the run
    ends within the writer's timeout with an error naming its pid, written to experiment.log,
    and no process or thread of ember's is left."""
    timeout, stopped = 1.0, list[tuple[int, float]]()
    model = TinyRegressor()

    def stop_the_writer(batch: Batch) -> None:
        step = current_step()
        if not stopped and step is not None and step.epoch == 2:  # epoch 1's sync started it
            (pid,) = metric_writer_processes()
            os.kill(pid, signal.SIGSTOP)
            stopped.append((pid, time.monotonic()))

    model.on_train_step = stop_the_writer
    run = tmp_path / "run"
    try:
        result = (
            quiet(run)
            .metric_train_numeric(LossMetric())
            .with_metric_logger(FileMetricLogger(run, writer_timeout=timeout))
            .num_epochs(3)
            .with_default_checkpointers()  # the first checkpoint syncs the logs: a flush
            .errors_in_result()
            .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
        )
        (pid, since) = stopped[0]
        elapsed = time.monotonic() - since
    finally:
        for pid, _ in stopped:
            if pid in metric_writer_processes():  # not killed and reaped: never left stopped
                os.kill(pid, signal.SIGKILL)
    assert isinstance(result.error, TimeoutError)
    message = str(result.error)
    assert f"metric-writer process (pid {pid}) was asked for a flush of" in message
    assert "has not answered within 1 s: it was killed" in message
    assert str(run) in message
    assert elapsed < timeout + 30  # the bound, and the run's own ending (one core, shared)
    assert f"pid {pid}" in (run / "experiment.log").read_text()
    assert result.checkpoints.keys() == {1}  # epoch 2's logs never reached the disk: not it
    assert ember_threads(since=threads_before) == []


def test_optimizer_over_another_models_parameters_is_refused(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """An optimizer built on a copy of the model would train nothing: the run fails at its
    start, naming the first parameter that is not the model's."""
    model = TinyRegressor()
    other = copy.deepcopy(model)
    result = (
        quiet(tmp_path / "run")
        .errors_in_result()
        .launch(Learner(model, torch.optim.Adam(other.parameters()), 1e-2))
    )
    assert isinstance(result.error, ValueError)
    assert str(result.error).startswith(
        "the optimizer's parameter 0 of group 0 (shape (1, 3)) is not a parameter of the model "
        "TinyRegressor"
    )
    assert result.last_epoch == 0
    assert ember_threads(since=threads_before) == []


def test_non_finite_loss_still_reported_first(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """A NaN loss (not only NaN gradients) keeps its own error: NonFiniteLossError."""
    model = TinyRegressor()

    def poison(batch: Batch) -> None:
        with torch.no_grad():
            weight(model).fill_(float("nan"))

    model.on_train_step = poison
    result = (
        quiet(tmp_path / "run")
        .with_default_checkpointers()
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
    )
    assert isinstance(result.error, NonFiniteLossError)
    assert not (tmp_path / "run" / "checkpoint" / "manifest-1.json").exists()
    assert ember_threads(since=threads_before) == []
