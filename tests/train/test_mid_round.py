"""Mid-round checkpoints and exact resume from them (``docs/training.md``, "Mid-round
checkpoints"): a stop inside a round, Ctrl-C, a chain of resumes, metrics without a state, the
run directory."""

from __future__ import annotations

import io
import logging
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember import CheckpointError
from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    LearningCheckpointer,
    LearningRateMetric,
    LossMetric,
    SupervisedTraining,
    load_checkpoint,
)
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._step import current_step
from tests.train.fixtures import TinyRegressor, loader
from tests.train.test_schedule import Batches, learner

RUN = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def training(
    directory: Path,
    *,
    items: int = 40,
    epochs: int = 3,
    max_steps: int | None = None,
    validate: int | None = None,
    checkpoint: int | None = None,
    accumulation: int = 1,
    workers: int = 0,
    shuffle: bool = True,
) -> SupervisedTraining:
    """Batches of 4, Loss and the lr logged, the default checkpointers."""
    train = loader(items, 4, shuffle=3 if shuffle else None, workers=workers)
    built = (
        SupervisedTraining(directory, train, loader(12, 4, shuffle=5, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .metric_train_numeric(LearningRateMetric())
        .num_epochs(epochs)
        .grads_accumulation(accumulation)
        .with_default_checkpointers()
    )
    if max_steps is not None:
        built = built.max_steps(max_steps)
    if validate is not None:
        built = built.validate_every(steps=validate)
    if checkpoint is not None:
        built = built.checkpoint_every(steps=checkpoint)
    return built


def launch(
    built: SupervisedTraining, *, stop_at: int | None = None, mid_window: bool = False
) -> Any:
    """Train a fresh learner; with ``stop_at``, stop during the unit that starts optimizer
    step ``stop_at + 1`` (``mid_window``: its window's first unit, when accumulating)."""
    trainer = learner()
    interrupter = built.interrupter()

    def stop(_: Any) -> None:
        context = current_step()
        at = context is not None and context.optimizer_steps == stop_at
        if at and not (mid_window and context is not None and context.accumulating):
            interrupter.stop("test")

    trainer.model.on_train_step = stop
    result = built.launch(trainer)
    assert result.error is None, result.traceback
    return result, trainer


def logs(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for split in ("train", "valid")
        for pattern in ("epoch-*/*", "steps.jsonl")  # the metric logs, and the split's steps
        for path in sorted((directory / split).glob(pattern))
    }


def same_weights(a: TinyRegressor, b: TinyRegressor) -> bool:
    return all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )


def latest(directory: Path) -> ResumePoint | None:
    with LearningCheckpointer(directory / "checkpoint", KeepLastNCheckpoints(2)) as checkpoints:
        return checkpoints.latest_complete_point()


@pytest.mark.parametrize(("accumulation", "stop_at", "point"), [(1, 5, (1, 6)), (3, 4, (2, 5))])
def test_a_stop_inside_an_epoch_checkpoints_at_the_next_step_and_resumes_exactly(
    tmp_path: Path, accumulation: int, stop_at: int, point: tuple[int, int]
) -> None:
    """No checkpoint_every: a stop inside epoch e trains on to the end of the window (of 3
    batches) and checkpoints that step, inside the epoch; resume_latest() continues there and
    the run ends with the weights and every metric log byte of an uninterrupted one."""
    _, full = launch(training(tmp_path / "full", accumulation=accumulation))
    directory = tmp_path / "stopped"
    stopped, _ = launch(
        training(directory, accumulation=accumulation), stop_at=stop_at, mid_window=True
    )
    assert stopped.stop_reason == "test"
    assert latest(directory) == ResumePoint(*point)
    partial = directory / "train" / f"epoch-{point[0]}" / "Loss.log"
    assert partial.read_text().endswith(",final\n")  # the stop's EndSplit wrote its line
    resumed_run, resumed = launch(training(directory, accumulation=accumulation).resume_latest())
    assert resumed_run.last_epoch == 3
    assert same_weights(full.model, resumed.model)
    assert logs(directory) == logs(tmp_path / "full")
    assert latest(directory) == ResumePoint(3)  # the round end removed the mid-round one


def test_ctrl_c_inside_an_epoch_writes_a_mid_epoch_checkpoint_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    """A real SIGINT in the first unit of a window of 2: the run trains the window's second
    batch, checkpoints step 4 inside epoch 1 and returns; the resume ends exact."""
    _, full = launch(training(tmp_path / "full", accumulation=2))
    directory = tmp_path / "interrupted"
    built = training(directory, accumulation=2)
    trainer = learner()

    def interrupt(_: Any) -> None:
        context = current_step()
        if context is not None and context.optimizer_steps == 3 and not context.accumulating:
            signal.raise_signal(signal.SIGINT)

    trainer.model.on_train_step = interrupt
    stopped = built.launch(trainer)
    assert stopped.stop_reason == "received SIGINT: stopped after the current step"
    assert stopped.last_epoch == 0
    assert latest(directory) == ResumePoint(1, 4)
    _, resumed = launch(training(directory, accumulation=2).resume_latest())
    assert same_weights(full.model, resumed.model)
    assert logs(directory) == logs(tmp_path / "full")


@RUN
@given(
    items=st.integers(6, 14),
    epochs=st.integers(1, 3),
    max_steps=st.one_of(st.none(), st.integers(2, 9)),
    validate=st.one_of(st.none(), st.integers(1, 4)),
    checkpoint=st.one_of(st.none(), st.integers(1, 3)),
    accumulation=st.integers(1, 3),
    workers=st.sampled_from([0, 2]),
    shuffle=st.booleans(),
    stops=st.lists(st.integers(0, 9), min_size=1, max_size=2),
)
def test_chained_stops_and_resumes_end_exactly_as_one_run(
    tmp_path_factory: pytest.TempPathFactory,
    items: int,
    epochs: int,
    max_steps: int | None,
    validate: int | None,
    checkpoint: int | None,
    accumulation: int,
    workers: int,
    shuffle: bool,
    stops: list[int],
) -> None:
    """For any durations, intervals, accumulation, workers and shuffling: stopped at the given
    steps and resumed each time (from a round end or inside a round, whichever is newest), a
    run ends with the weights and metric log bytes of one that never stopped."""
    base = tmp_path_factory.mktemp("chain")
    settings_: dict[str, Any] = {
        "items": items,
        "epochs": epochs,
        "max_steps": max_steps,
        "validate": validate,
        "checkpoint": checkpoint,
        "accumulation": accumulation,
        "shuffle": shuffle,
    }
    _, full = launch(training(base / "full", **settings_))
    directory = base / "chain"
    for number, stop_at in enumerate(sorted(set(stops))):
        built = training(directory, workers=workers, **settings_)
        launch(built.resume_latest() if number else built, stop_at=stop_at)
    _, resumed = launch(training(directory, **settings_).resume_latest())
    assert same_weights(full.model, resumed.model)
    assert logs(directory) == logs(base / "full")


def test_without_a_metric_state_a_stop_abandons_the_round_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A user metric without state_dict(): a stop inside a round drops the partial window and
    keeps the last round end (the warning says why), and the resume from it is exact."""
    _, full = launch(training(tmp_path / "full").metric_train(Batches()))
    directory = tmp_path / "stopped"
    with caplog.at_level(logging.WARNING, logger="ember.train"):
        stopped, _ = launch(training(directory).metric_train(Batches()), stop_at=14)
    assert stopped.stop_reason == "test" and stopped.last_epoch == 1
    assert "training stopped inside epoch 2 without a checkpoint there, because the train " in (
        caplog.text
    )
    assert latest(directory) == ResumePoint(1)
    _, resumed = launch(training(directory).metric_train(Batches()).resume_latest())
    assert same_weights(full.model, resumed.model)
    assert logs(directory) == logs(tmp_path / "full")


def test_a_resume_whose_logs_were_cut_short_or_whose_metrics_changed_is_refused(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "stopped"
    launch(training(directory), stop_at=4)
    assert latest(directory) == ResumePoint(1, 5)
    log = directory / "train" / "epoch-1" / "Loss.log"
    text = log.read_bytes()
    log.write_bytes(text[:3])
    failed = training(directory).resume_latest().errors_in_result().launch(learner())
    assert isinstance(failed.error, CheckpointError)
    assert "the metric log" in str(failed.error) and "fewer than the" in str(failed.error)
    log.write_bytes(text)
    changed = (
        training(directory)
        .metric_train(Batches())
        .resume_latest()
        .errors_in_result()
        .launch(learner())
    )
    assert isinstance(changed.error, CheckpointError)
    assert "holds no running state of the train metric 'Batches'" in str(changed.error)


def test_mid_round_checkpoints_in_the_directory_and_for_export(tmp_path: Path) -> None:
    """A stopped run's mid-round checkpoint counts as the run's (a fresh run held to the
    directory is refused, and overwrite() removes it); load_checkpoint and the result list
    round ends only."""
    directory = tmp_path / "run"
    stopped, _ = launch(training(directory, checkpoint=5), stop_at=13)
    assert latest(directory) == ResumePoint(2, 14)
    assert sorted(stopped.checkpoints) == [1]
    loaded = load_checkpoint(directory, "last", into=TinyRegressor())
    assert same_weights(loaded, load_checkpoint(directory, 1, into=TinyRegressor()))
    with pytest.raises(Exception, match=r"checkpoint/ \(10 checkpoint files\)"):
        launch(training(directory).exact_directory())
    launch(training(directory).overwrite())
    assert not (directory / "checkpoint" / "step-14").exists()


def test_the_renderer_is_told_the_steps_and_where_a_resumed_split_starts(tmp_path: Path) -> None:
    """A run bounded by max_steps shows its steps; resumed inside a round, the renderer hears
    the steps taken before and the items of the pass already done."""
    stream = io.StringIO()
    directory = tmp_path / "run"
    launch(training(directory, max_steps=8).renderer(CliMetricsRenderer(stream)), stop_at=5)
    assert "[round 1/1] train step 6/8 (75%) · 24/40 items (60%)" in stream.getvalue()
    stream = io.StringIO()
    resumed = training(directory, max_steps=8).resume_latest()
    launch(resumed.renderer(CliMetricsRenderer(stream, interval=0.0)))
    lines = stream.getvalue().splitlines()
    assert lines[:4] == [
        f"Run directory: {directory}",
        "Starting training for 8 steps in 1 round. (resuming at step 6, in round 1)",
        "Starting split 'train' with 40 items.",
        "Resuming after 24 items.",
    ]
    assert lines[4].startswith("[round 1/1] train step 7/8 (87%) · 28/40 items (70%)")


@pytest.mark.parametrize(
    ("copy", "fallback"), [(True, ResumePoint(2, 16)), (False, ResumePoint(1))]
)
def test_a_step_checkpoint_named_for_another_step_is_skipped_for_the_previous_point(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, copy: bool, fallback: ResumePoint
) -> None:
    """A user copies (or renames) step-16/ to step-18/: its files verify but it holds step 16;
    resume_latest() skips it with a warning naming the contradiction and resumes from the
    previous valid point (step 16, or the end of epoch 1), ending exactly as one run."""
    _, full = launch(training(tmp_path / "full"))
    directory = tmp_path / "stopped"
    launch(training(directory), stop_at=15)
    checkpoints = directory / "checkpoint"
    assert latest(directory) == ResumePoint(2, 16)
    if copy:
        shutil.copytree(checkpoints / "step-16", checkpoints / "step-18")
    else:
        (checkpoints / "step-16").rename(checkpoints / "step-18")
    assert latest(directory) == fallback
    with caplog.at_level(logging.WARNING, logger="ember.train"):
        resumed_run, resumed = launch(training(directory).resume_latest())
    assert "skips the checkpoint of step 18 (in epoch 2)" in caplog.text
    assert "holds step 16" in caplog.text
    assert resumed_run.last_epoch == 3
    assert same_weights(full.model, resumed.model)
    assert logs(directory) == logs(tmp_path / "full")
