"""Signals during launch: Ctrl-C stops and returns, a second aborts; a scheduler's SIGTERM or
SIGUSR1 stops at a step checkpoint, finishes the run directory, then exits with code 75."""

from __future__ import annotations

import io
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ember._errors import REQUEUE_EXIT_CODE, TrainingError
from ember._rundir.layout import LOCK
from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    Learner,
    LearningResult,
    LossMetric,
    SupervisedTraining,
)
from tests.train.fixtures import Batch, TinyRegressor, loader

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def run(directory: Path, on_step: Callable[[int], None]) -> LearningResult[TinyRegressor]:
    """5 epochs of 10 steps, a checkpoint at the end of each and at a stop; ``on_step(n)``
    runs in the ``n``-th step."""
    model = TinyRegressor()
    steps = [0]

    def step(batch: Batch) -> None:
        steps[0] += 1
        on_step(steps[0])

    model.on_train_step = step
    return (
        SupervisedTraining(directory, loader(40, 4), loader(8, 4, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_checkpointing_strategy(KeepLastNCheckpoints(1))
        .with_default_checkpointers()
        .num_epochs(5)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.01))
    )


def send_at(step: int, *signals: signal.Signals) -> Callable[[int], None]:
    def send(n: int) -> None:
        if n == step:
            for sig in signals:
                signal.raise_signal(sig)

    return send


def test_ctrl_c_stops_after_the_step_and_returns_a_second_aborts(tmp_path: Path) -> None:
    """First SIGINT: launch returns, stopped after the step, its step checkpoint written;
    two at once: KeyboardInterrupt, the lock still released; the handlers come back."""
    before = [signal.getsignal(sig) for sig in HANDLED]
    result = run(tmp_path / "a", send_at(15, signal.SIGINT))
    assert result.error is None
    assert result.stop_reason == "received SIGINT: stopped after the current step"
    assert result.last_epoch == 1
    assert (tmp_path / "a" / "checkpoint" / "step-15" / "manifest-2.json").exists()
    with pytest.raises(KeyboardInterrupt, match="second SIGINT"):
        run(tmp_path / "b", send_at(3, signal.SIGINT, signal.SIGINT))
    assert not (tmp_path / "b" / LOCK).exists()
    assert [signal.getsignal(sig) for sig in HANDLED] == before


@pytest.mark.parametrize("preemption", [signal.SIGTERM, signal.SIGUSR1])
def test_a_preemption_signal_checkpoints_finishes_the_run_then_exits_75(
    tmp_path: Path, preemption: signal.Signals, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM / SIGUSR1 at step 15, twice (torchrun passes on the scheduler's SIGTERM: a
    worker gets two): training stops after that step, the step checkpoint is written, the run
    directory is finished (the attempt's end line, the lock released), then launch raises
    SystemExit(75) and says why on stderr; the handlers come back."""
    before = [signal.getsignal(sig) for sig in HANDLED]
    with pytest.raises(SystemExit) as exiting:
        run(tmp_path, send_at(15, preemption, preemption))
    assert exiting.value.code == REQUEUE_EXIT_CODE == 75
    assert (tmp_path / "checkpoint" / "step-15" / "manifest-2.json").exists()
    assert not (tmp_path / LOCK).exists()
    log = (tmp_path / "experiment.log").read_text(encoding="utf-8")
    assert f"Training interrupted: received {preemption.name}" in log
    assert re.search(r"Attempt of pid \d+ ended$", log.rstrip())
    assert f"ember: received {preemption.name}" in capsys.readouterr().err
    assert [signal.getsignal(sig) for sig in HANDLED] == before


def test_a_training_that_fails_ends_with_its_error_whatever_the_signal(tmp_path: Path) -> None:
    """SIGTERM in step 3, which then raises: launch raises TrainingError, not exit 75."""

    def signal_then_fail(n: int) -> None:
        if n == 3:
            signal.raise_signal(signal.SIGTERM)
            raise ValueError("the step failed")

    with pytest.raises(TrainingError, match="with the ValueError") as raised:
        run(tmp_path, signal_then_fail)
    assert str(raised.value.__cause__) == "the step failed"
