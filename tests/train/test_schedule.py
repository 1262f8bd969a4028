"""Step-granular training: max_steps, validate_every, checkpoint_every (``_schedule.py``)."""

from __future__ import annotations

import io
import math
import multiprocessing
import os
import random
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    Learner,
    LearningRateMetric,
    LossMetric,
    SingleDevice,
    SupervisedTraining,
)
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._events import EndEpoch, ProcessedItem, Start, StartSplit
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.query import MetricQuery
from ember.train._schedule import Every, RoundMarks, Schedule
from ember.train._step import current_step
from tests.train.fixtures import SpyProcessor, TinyRegressor, loader, read_lines, run_loop


def builder(directory: Path, items: int = 40) -> SupervisedTraining:
    return (
        SupervisedTraining(directory, loader(items, 4, shuffle=3), loader(12, 4, shuffle=5, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
    )


class Batches:
    """A user's metric without a saved state (no state_dict / load_state_dict)."""

    name = "Batches"
    input_type = object

    def update(self, item: object, metadata: MetricMetadata) -> MetricEntry:
        return MetricEntry(self.name, "1", "1")

    def compute(self) -> MetricEntry:
        return MetricEntry(self.name, "1", "1")

    def clear(self) -> None:
        pass


def learner() -> Learner[TinyRegressor]:
    torch.manual_seed(0)
    model = TinyRegressor()
    return Learner(model, torch.optim.Adam(model.parameters()), 1e-2)


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda b: b.max_steps(0), ValueError, "max_steps must be >= 1, got 0"),
        (lambda b: b.max_steps(2.5), TypeError, "max_steps must be an int, got 2.5"),
        (lambda b: b.validate_every(), TypeError, "takes exactly one of steps=N | epochs=N"),
        (
            lambda b: b.validate_every(steps=2, epochs=1),
            TypeError,
            "got steps=2 and epochs=1",
        ),
        (lambda b: b.validate_every(steps=0), ValueError, "validate_every(steps=...) must be >="),
        (lambda b: b.validate_every(steps="3"), TypeError, "must be an int, got '3'"),
        (lambda b: b.checkpoint_every(seconds=0), ValueError, "must be > 0, got 0"),
        (lambda b: b.checkpoint_every(seconds="1"), TypeError, "a number of seconds, got '1'"),
        (lambda b: b.checkpoint_every(epochs=-1), ValueError, "must be >= 1, got -1"),
    ],
)
def test_bad_intervals_are_refused_at_the_call(
    tmp_path: Path, call: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        call(builder(tmp_path))
    assert message in str(caught.value)


def test_step_validation_without_valid_items_is_refused_at_launch(tmp_path: Path) -> None:
    valid = loader(12, 4)
    valid.num_items = lambda: 0  # type: ignore[method-assign]  # a custom loader, empty
    training = (
        SupervisedTraining(tmp_path, loader(40, 4), valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .validate_every(steps=2)
    )
    with pytest.raises(ValueError, match=r"validate_every\(steps=2\) validates over the valid"):
        training.launch(learner())


def test_checkpoint_interval_without_checkpointers_is_refused_at_launch(tmp_path: Path) -> None:
    training = builder(tmp_path).checkpoint_every(steps=5)
    with pytest.raises(ValueError, match=r"checkpoint_every\(steps=5\) needs checkpointers"):
        training.launch(learner())


def test_checkpoints_inside_rounds_need_every_train_metric_to_save_its_state(
    tmp_path: Path,
) -> None:
    """A step interval that falls inside rounds is refused at launch when a train metric has no
    state_dict(); one that is a whole number of rounds only checkpoints round ends: allowed."""

    training = (
        builder(tmp_path)
        .metric_train(Batches())
        .validate_every(steps=2)
        .max_steps(4)
        .with_default_checkpointers()
    )
    with pytest.raises(ValueError, match="checkpoints inside rounds") as refused:
        training.checkpoint_every(steps=3).launch(learner())
    assert str(refused.value).startswith(
        "checkpoint_every(steps=3) checkpoints inside rounds, and a checkpoint there holds every "
        "train metric's running state, but the train metric 'Batches' (Batches) cannot save "
        "its running state: give it state_dict() and load_state_dict()"
    )
    result = training.checkpoint_every(steps=4).launch(learner())
    assert result.error is None and result.last_epoch == 2


def test_checkpoint_marks() -> None:
    marks = RoundMarks(steps=0, passes=0, time=10.0)
    assert not marks.due(Every("steps", 4), 3, 0, 10.0)
    assert marks.due(Every("steps", 4), 5, 0, 10.0)  # a step at or after 4
    assert not marks.due(Every("seconds", 2.0), 9, 9, 11.5)
    assert marks.due(Every("seconds", 2.0), 9, 9, 12.0)
    assert marks.due(Every("epochs", 2), 0, 2, 10.0)
    assert marks.due(None, 0, 0, 10.0)


# --- the event sequence ------------------------------------------------------------------------


def expected_rounds(
    batches: int, accumulation: int, epochs: int | None, max_steps: int | None, every: int | None
) -> list[int]:
    """The optimizer steps at each validation, as docs/training.md states them."""
    per_pass = math.ceil(batches / accumulation)
    bounds = [b for b in (max_steps, None if epochs is None else epochs * per_pass) if b]
    total = min(bounds)
    if every is None:  # a round per epoch, the last one cut short by max_steps
        return [min(total, per_pass * (k + 1)) for k in range(math.ceil(total / per_pass))]
    return [min(total, every * (k + 1)) for k in range(math.ceil(total / every))]


def expected_checkpoints(points: list[int], every: int | None) -> list[tuple[str, int, int]]:
    """Where a run checkpoints, as docs/training.md states it: ``("end", round, step)`` after
    a validation, ``("mid", round, step)`` inside a round. Without checkpoint_every every round
    end; with ``steps=N`` every multiple of N (at the round's end when it ends a round) and the
    last round."""
    if every is None:
        return [("end", k + 1, step) for k, step in enumerate(points)]
    taken: list[tuple[str, int, int]] = []
    mark = 0
    for step in range(1, points[-1] + 1):
        round_number = next(k for k, end in enumerate(points, start=1) if end >= step)
        if step in points:
            if step // every > mark // every or step == points[-1]:
                taken.append(("end", round_number, step))
                mark = step
        elif step % every == 0:
            taken.append(("mid", round_number, step))
            mark = step
    return taken


class SpyCheckpointer:
    """A run checkpointer that takes mid-round checkpoints too and records where each one is
    taken (nothing is written)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.taken: list[tuple[str, int, int]] = []

    def checkpoint(
        self, epoch: int, records: TrainingRecords, query: MetricQuery
    ) -> TrainingRecords:
        self.taken.append(("end", epoch, records.state.metadata["loop"]["optimizer_steps"]))
        return records

    def checkpoint_mid_round(self, epoch: int, step: int, records: TrainingRecords) -> None:
        assert records.state.metadata["step"] == step
        self.taken.append(("mid", epoch, step))

    def save(self, epoch: int, records: TrainingRecords) -> None:
        raise AssertionError("no stop: nothing to keep")

    def restore(self, epoch: int) -> TrainingRecords:
        raise AssertionError("not resumed")

    def restore_mid_round(self, epoch: int, step: int) -> TrainingRecords:
        raise AssertionError("not resumed")

    def complete_epochs(self) -> list[int]:
        return []

    def latest_complete_epoch(self) -> int | None:
        return None

    def latest_complete_point(self) -> ResumePoint | None:
        return None

    def close(self) -> None:
        pass


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.integers(1, 14),
    epochs=st.one_of(st.none(), st.integers(1, 3)),
    max_steps=st.one_of(st.none(), st.integers(1, 12)),
    every=st.one_of(st.none(), st.integers(1, 5)),
    checkpoint=st.one_of(st.none(), st.integers(1, 4)),
    accumulation=st.integers(1, 3),
    workers=st.sampled_from([0, 2]),
    shuffle=st.booleans(),
)
def test_event_sequence_steps_validation_and_checkpoint_points(
    items: int,
    epochs: int | None,
    max_steps: int | None,
    every: int | None,
    checkpoint: int | None,
    accumulation: int,
    workers: int,
    shuffle: bool,
) -> None:
    """The validations, the optimizer steps and the checkpoints (round ends and mid-round) are
    where the docs say, for any durations, intervals, accumulation, workers and shuffling."""
    if epochs is None and max_steps is None:
        epochs = 1
    batches = math.ceil(items / 2)
    schedule = Schedule(
        epochs,
        max_steps,
        Every("epochs", 1) if every is None else Every("steps", every),
        None if checkpoint is None else Every("steps", checkpoint),
    )
    spy = SpyProcessor()
    checkpoints = SpyCheckpointer(Path("unused"))
    seen: list[int] = []
    model = TinyRegressor()
    model.on_train_step = lambda _: seen.append(current_step().optimizer_steps)  # type: ignore[union-attr]
    result = run_loop(
        SingleDevice(),
        Learner(model, torch.optim.SGD(model.parameters()), 1e-2),
        loader(items, 2, shuffle=7 if shuffle else None, workers=workers),
        loader(3, 2),
        spy,
        epochs or 1,
        grads_accumulation=accumulation,
        schedule=schedule,
        checkpointer=checkpoints,
        mid_round_blocker=None,
    )
    points = expected_rounds(batches, accumulation, epochs, max_steps, every)
    valid_steps = []
    split = None
    for kind, event in spy.events:
        if isinstance(event, StartSplit):
            split = kind
        elif kind == "valid" and isinstance(event, ProcessedItem) and split == "valid":
            valid_steps.append(event.item.step)
    first_valid_step = valid_steps[:: math.ceil(3 / 2)]  # the first item of each validation
    assert first_valid_step == points
    assert result.last_round == len(points)
    assert result.stop_reason is None
    starts = [e for _, e in spy.events if isinstance(e, Start)]
    total_steps = None if max_steps is None else points[-1]
    assert starts == [Start(len(points), 1, total_steps, 0, stop_checkpoints=True)]
    ends = [e.epoch for _, e in spy.events if isinstance(e, EndEpoch)]
    assert ends == list(range(1, len(points) + 1))
    # every batch trained is counted once and the steps taken are the last point's
    assert len(seen) == sum(1 for _, e in spy.events if isinstance(e, ProcessedItem)) - 2 * len(
        points
    )
    assert seen[-1] + 1 >= points[-1] >= seen[-1]
    assert checkpoints.taken == expected_checkpoints(points, checkpoint)


# --- exact resume ------------------------------------------------------------------------------


def step_run(
    directory: Path,
    *,
    resume: bool = False,
    stop_at: int | None = None,
    kill_at: int = -1,
    checkpoint: int = 3,
) -> Any:
    """A run validating every 3 steps over 2.5 shuffled passes and checkpointing every
    ``checkpoint`` steps (at round ends for 3, also inside rounds for 2)."""
    training = (
        builder(directory, items=36)
        .metric_train_numeric(LearningRateMetric())
        .num_epochs(3)
        .max_steps(25)
        .validate_every(steps=3)
        .checkpoint_every(steps=checkpoint)
        .with_checkpointing_strategy(KeepLastNCheckpoints(2))
        .with_default_checkpointers()
        .summary()
    )
    if resume:
        training = training.resume_latest()
    trainer = learner()
    interrupter = training.interrupter()

    def stop(_: Any) -> None:
        context = current_step()
        steps = None if context is None else context.optimizer_steps
        if steps == stop_at:
            interrupter.stop("test")
        if steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    trainer.model.on_train_step = stop
    result = training.launch(trainer)
    assert result.error is None, result.traceback
    return result, trainer


def step_logs(directory: Path) -> dict[str, list[str]]:
    return {
        str(path.relative_to(directory)): read_lines(path)
        for split in ("train", "valid")
        for pattern in ("epoch-*/*", "steps.jsonl")  # the metric logs, and the split's steps
        for path in sorted((directory / split).glob(pattern))
    }


def test_step_run_layout_and_summary(tmp_path: Path) -> None:
    result, _ = step_run(tmp_path)
    assert result.last_epoch == 9  # 25 steps, a validation every 3 and one at the end
    assert sorted(p.name for p in (tmp_path / "valid").iterdir()) == sorted(
        [*(f"epoch-{k}" for k in range(1, 10)), "steps.jsonl"]
    )
    assert len(read_lines(tmp_path / "train" / "epoch-9" / "Loss.log")) == 2  # 1 batch + final
    assert result.summary is not None


@pytest.mark.parametrize("stop_at", [4, 13, 22])
def test_interrupted_step_run_resumes_bit_identical(tmp_path: Path, stop_at: int) -> None:
    _, full_learner = step_run(tmp_path / "full")
    directory = tmp_path / "resumed"
    stopped, _ = step_run(directory, stop_at=stop_at)
    assert stopped.stop_reason == "test"
    _, resumed_learner = step_run(directory, resume=True)
    for (name, x), (_, y) in zip(
        full_learner.model.state_dict().items(),
        resumed_learner.model.state_dict().items(),
        strict=True,
    ):
        assert torch.equal(x, y), name
    assert step_logs(directory) == step_logs(tmp_path / "full")


def killed_run(directory: str, out: str, kill_at: int, checkpoint: int) -> None:
    """In a child process: resume the step run, SIGKILL itself at optimizer step ``kill_at``
    (or finish, ``kill_at < 0``, and save the weights to ``out``)."""
    from safetensors.torch import save_file

    _, trainer = step_run(Path(directory), resume=True, kill_at=kill_at, checkpoint=checkpoint)
    save_file({k: v.contiguous() for k, v in trainer.model.state_dict().items()}, out)


@pytest.mark.parametrize(
    ("kills", "seed"),
    [pytest.param(5, 3, id="ci"), pytest.param(20, 13, id="full", marks=pytest.mark.slow)],
)
def test_sigkill_at_random_steps_then_resume(tmp_path: Path, kills: int, seed: int) -> None:
    """SIGKILL at ``kills`` seeded random steps in a chain of resumes (20 in the full property,
    ``make test-slow``; 5 in CI): the weights and metric logs
    end bit-identical to one uninterrupted run. Checkpoints are taken every 2 steps with a
    validation every 3: at round ends (steps 6, 12, ...) and inside rounds (2, 4, 8, ...), so
    the chain resumes from both kinds, and a resume from a mid-round one cuts the partial
    round's logs back. The processes are forked from a server that imported torch once, so 21
    of them cost seconds, not 21 imports."""
    from safetensors.torch import load_file

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["tests.train.test_schedule"])
    _, reference = step_run(tmp_path / "full", checkpoint=2)
    directory, out = tmp_path / "killed", tmp_path / "out.safetensors"
    steps = sorted(random.Random(seed).sample(range(25), kills))
    resumed_from: set[str] = set()
    for kill_at in [*steps, -1]:
        checkpoints = LearningCheckpointer(directory / "checkpoint", KeepLastNCheckpoints(2))
        with checkpoints:
            point = checkpoints.latest_complete_point()
        if point is not None:
            resumed_from.add("round end" if point.step is None else "mid-round")
        process = context.Process(target=killed_run, args=(str(directory), str(out), kill_at, 2))
        process.start()
        process.join(timeout=120)
        assert process.exitcode == (-signal.SIGKILL if kill_at >= 0 else 0), kill_at
    assert resumed_from == {"round end", "mid-round"}
    got = load_file(out)
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(tensor, got[name]), name
    assert step_logs(directory) == step_logs(tmp_path / "full")


def test_a_seconds_interval_checkpoints_at_the_first_step_after_it(tmp_path: Path) -> None:
    """checkpoint_every(seconds=T) is read at every optimizer step: with T tiny, every step
    inside a round is a mid-round checkpoint and every round end is checkpointed."""
    checkpoints = SpyCheckpointer(tmp_path)
    run_loop(
        SingleDevice(),
        learner(),
        loader(10, 2),
        loader(3, 2),
        SpyProcessor(),
        2,
        schedule=Schedule(2, None, Every("epochs", 1), Every("seconds", 1e-9)),
        checkpointer=checkpoints,
        mid_round_blocker=None,
    )
    assert checkpoints.taken == [
        *[("mid", 1, step) for step in range(1, 5)],
        ("end", 1, 5),
        *[("mid", 2, step) for step in range(6, 10)],
        ("end", 2, 10),
    ]


def test_keep_last_one_with_checkpoints_every_ten_epochs_keeps_only_the_last(
    tmp_path: Path,
) -> None:
    """The user's setting: KeepLastNCheckpoints(1) and checkpoint_every(epochs=10) over 40
    epochs: only epoch 40's checkpoint is left (it counted epochs, and kept all four); a resume
    to 50 keeps only 50."""

    def run(epochs: int) -> None:
        built = (
            builder(tmp_path, items=4)
            .num_epochs(epochs)
            .checkpoint_every(epochs=10)
            .with_checkpointing_strategy(KeepLastNCheckpoints(1))
            .with_default_checkpointers()
        )
        result = built.resume_latest().launch(learner())
        assert result.error is None, result.traceback

    run(40)
    checkpoints = tmp_path / "checkpoint"
    assert sorted(path.name for path in checkpoints.glob("manifest-*.json")) == ["manifest-40.json"]
    run(50)
    assert sorted(path.name for path in checkpoints.glob("manifest-*.json")) == ["manifest-50.json"]
    assert sorted(path.name for path in checkpoints.glob("model-*")) == ["model-50.safetensors"]
