"""Callbacks: every point of the loop, in the documented order, with the run in reach."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.train import (
    Callback,
    CliMetricsRenderer,
    Hooks,
    Learner,
    LossMetric,
    RunView,
    Split,
    SupervisedTraining,
    TrainingError,
    ValueMetric,
)
from ember.train._callbacks.base import CALLBACK_POINTS
from ember.train._plan import plan_run
from tests.train.fixtures import TinyRegressor, bias, loader, read_lines, weight


class Recorder(Callback):
    """Writes each point it is called at, with what it was given."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.views: list[RunView] = []

    def on_run_start(self, run: RunView) -> None:
        self.seen.append(f"run_start {run.epoch}")

    def on_epoch_start(self, epoch: int) -> None:
        self.seen.append(f"epoch_start {epoch}")

    def on_split_start(self, split: Split, epoch: int) -> None:
        self.seen.append(f"split_start {split.value} {epoch}")

    def on_train_batch_start(self, step: RunView) -> None:
        self.seen.append(f"batch_start {step.epoch}.{step.iteration}")

    def on_before_optimizer_step(self, step: RunView) -> None:
        self.seen.append(f"before_step {step.optimizer_steps}")

    def on_after_optimizer_step(self, step: RunView) -> None:
        self.seen.append(f"after_step {step.optimizer_steps}")

    def on_train_batch_end(self, step: RunView) -> None:
        self.seen.append(f"batch_end {step.epoch}.{step.iteration}")

    def on_split_end(self, split: Split, epoch: int) -> None:
        self.seen.append(f"split_end {split.value} {epoch}")

    def on_validation_end(self, epoch: int, values: Mapping[str, float]) -> None:
        self.seen.append(f"validation_end {epoch} {sorted(values)}")

    def on_epoch_end(self, epoch: int) -> None:
        self.seen.append(f"epoch_end {epoch}")

    def on_checkpoint_saved(self, epoch: int, step: int | None) -> None:
        self.seen.append(f"checkpoint {epoch} {step}")

    def on_run_end(self, run: RunView) -> None:
        self.seen.append(f"run_end {run.optimizer_steps}")

    def on_error(self, error: BaseException) -> None:
        self.seen.append(f"error {type(error).__name__}")


def quiet(directory: Path, train: Any, valid: Any = None) -> SupervisedTraining:
    return SupervisedTraining(directory, train, valid).renderer(CliMetricsRenderer(io.StringIO()))


def learner_of(model: TinyRegressor, lr: float = 0.1) -> Learner[TinyRegressor]:
    return Learner(model, torch.optim.SGD(model.parameters(), lr=lr))


def test_every_point_is_called_in_the_documented_order(tmp_path: Path) -> None:
    """Two rounds of three batches, a window of two batches (the last one short), a
    checkpoint every 2 steps inside rounds and at each round's end: the recorded sequence is
    the module doc's, point for point."""
    recorder = Recorder()
    torch.manual_seed(0)
    model = TinyRegressor()
    training = (
        quiet(tmp_path, loader(12, 4), loader(4, 4))
        .metrics(LossMetric())
        .num_epochs(2)
        .grads_accumulation(2)
        .with_default_checkpointers()
        .checkpoint_every(steps=2)
        .with_callbacks(recorder)
    )
    result = training.launch(learner_of(model))
    assert result.error is None, result.traceback
    expected = ["run_start 0"]
    for epoch, steps in ((1, (1, 2)), (2, (3, 4))):
        first, second = steps
        expected += [f"epoch_start {epoch}", f"split_start train {epoch}"]
        expected += [f"batch_start {epoch}.1", f"batch_end {epoch}.1"]
        expected += [f"batch_start {epoch}.2", f"before_step {first - 1}"]
        expected += [f"after_step {first}", f"batch_end {epoch}.2"]
        expected += [f"batch_start {epoch}.3", f"before_step {second - 1}"]
        expected += [f"after_step {second}", f"batch_end {epoch}.3"]
        expected += [f"split_end train {epoch}", f"split_start valid {epoch}"]
        expected += [f"split_end valid {epoch}", f"validation_end {epoch} ['Loss']"]
        expected += [f"epoch_end {epoch}", f"checkpoint {epoch} None"]
    expected += ["run_end 4"]
    assert recorder.seen == expected


def test_a_mid_round_checkpoint_is_a_point_after_its_batch(tmp_path: Path) -> None:
    """checkpoint_every(steps=1) inside a round: on_checkpoint_saved(epoch, step) follows
    the batch that took the step."""
    recorder = Recorder()
    model = TinyRegressor()
    training = (
        quiet(tmp_path, loader(8, 4))
        .metric_train_numeric(LossMetric())
        .with_default_checkpointers()
        .checkpoint_every(steps=1)
        .with_callbacks(recorder)
    )
    training.launch(learner_of(model))
    seen = [s for s in recorder.seen if s.startswith(("batch_end", "checkpoint"))]
    assert seen == ["batch_end 1.1", "checkpoint 1 1", "batch_end 1.2", "checkpoint 1 None"]


class StepWatch(Callback):
    """Keeps what each optimizer step showed it: the run in reach."""

    def __init__(self) -> None:
        self.steps: list[tuple[int, int, int, float, bool]] = []
        self.models: set[int] = set()
        self.optimizers: set[int] = set()

    def on_after_optimizer_step(self, step: RunView) -> None:
        loss = step.loss
        assert loss is not None and not loss.requires_grad
        self.steps.append(
            (step.optimizer_steps, step.epoch, step.iteration, float(loss), step.is_main_process)
        )
        self.models.add(id(step.model))
        self.optimizers.add(id(step.optimizer))


def test_every_optimizer_step_is_seen_once_with_the_model_optimizer_and_loss(
    tmp_path: Path,
) -> None:
    """Each step is seen once, counted from 1, with the Learner's model and optimizer, and the
    batch's loss equal to the Loss.log line of that batch."""
    watch = StepWatch()
    model = TinyRegressor()
    learner = learner_of(model)
    training = quiet(tmp_path, loader(12, 4)).metric_train_numeric(LossMetric()).num_epochs(2)
    result = training.with_callbacks(watch).launch(learner)
    assert result.error is None, result.traceback
    assert [s[0] for s in watch.steps] == [1, 2, 3, 4, 5, 6]
    assert [(s[1], s[2]) for s in watch.steps] == [(e, i) for e in (1, 2) for i in (1, 2, 3)]
    assert watch.models == {id(model)} and watch.optimizers == {id(learner.optimizer)}
    assert all(s[4] for s in watch.steps)
    logged = [
        float(line.split(",")[0])
        for epoch in (1, 2)
        for line in read_lines(tmp_path / "train" / f"epoch-{epoch}" / "Loss.log")[:-1]
    ]
    assert [s[3] for s in watch.steps] == logged


class Values(Callback):
    def __init__(self) -> None:
        self.values: dict[int, dict[str, float]] = {}

    def on_validation_end(self, epoch: int, values: Mapping[str, float]) -> None:
        self.values[epoch] = dict(values)


def test_validation_end_gets_the_epoch_values_of_the_logs(tmp_path: Path) -> None:
    """on_validation_end's values are what each valid Loss.log's final line holds."""
    values = Values()
    model = TinyRegressor()
    training = quiet(tmp_path, loader(8, 4), loader(10, 4)).metrics(LossMetric()).num_epochs(2)
    training.with_callbacks(values).launch(learner_of(model))
    for epoch in (1, 2):
        final = read_lines(tmp_path / "valid" / f"epoch-{epoch}" / "Loss.log")[-1]
        assert final.endswith(",final")
        assert values.values[epoch] == {"Loss": float(final.split(",")[0])}


class StopAt(Callback):
    def __init__(self, at: int, where: str = "after") -> None:
        self.at, self.where = at, where

    def on_after_optimizer_step(self, step: RunView) -> None:
        if self.where == "after" and step.optimizer_steps == self.at:
            step.stop(f"enough at step {self.at}")

    def on_train_batch_end(self, step: RunView) -> None:
        if self.where == "batch_end" and step.iteration == self.at:
            step.stop(f"enough at batch {self.at}")


def stopped_run(directory: Path, callback: Callback, **settings: Any) -> Any:
    torch.manual_seed(0)
    model = TinyRegressor()
    training = quiet(directory, loader(32, 2, shuffle=3)).metric_train_numeric(LossMetric())
    if settings.get("accumulation"):
        training = training.grads_accumulation(settings["accumulation"])
    if settings.get("checkpoints"):
        training = training.with_default_checkpointers()
    result = training.num_epochs(5).with_callbacks(callback).launch(learner_of(model))
    return result, model


def test_a_stop_at_step_10_ends_two_runs_at_step_10_with_the_same_weights(
    tmp_path: Path,
) -> None:
    """step.stop() in on_after_optimizer_step ends the run after that step: two runs stop at
    step 10 with bit-identical weights, which a raw loop of 10 steps reaches too."""
    first, model_a = stopped_run(tmp_path / "a", StopAt(10))
    second, model_b = stopped_run(tmp_path / "b", StopAt(10))
    assert first.stop_reason == second.stop_reason == "enough at step 10"
    assert torch.equal(weight(model_a), weight(model_b)) and torch.equal(
        bias(model_a), bias(model_b)
    )
    torch.manual_seed(0)
    raw = TinyRegressor()
    optim = torch.optim.SGD(raw.parameters(), lr=0.1)
    batches = iter(loader(32, 2, shuffle=3))
    for _ in range(10):
        batch = next(batches)
        optim.zero_grad()
        torch.nn.functional.mse_loss(raw(batch.x), batch.y).backward()  # type: ignore[no-untyped-call]  # torch\'s, untyped
        optim.step()
    assert torch.equal(weight(raw), weight(model_a)) and torch.equal(bias(raw), bias(model_a))
    lines = read_lines(tmp_path / "a" / "train" / "epoch-1" / "Loss.log")
    assert len([line for line in lines if not line.endswith("final")]) == 10


def test_a_stop_inside_a_window_completes_the_window_and_checkpoints_there(
    tmp_path: Path,
) -> None:
    """A stop at batch 5 of windows of 3 batches trains batch 6, steps (step 2), and takes a
    mid-round checkpoint at step 2; the reason is the result's."""
    result, _ = stopped_run(tmp_path, StopAt(5, "batch_end"), accumulation=3, checkpoints=True)
    assert result.stop_reason == "enough at batch 5"
    assert (tmp_path / "checkpoint" / "step-2" / "manifest-1.json").is_file()


class Broken(Callback):
    def __init__(self, point: str) -> None:
        self.point = point
        self.errors: list[BaseException] = []

    def on_after_optimizer_step(self, step: RunView) -> None:
        if self.point == "on_after_optimizer_step" and step.optimizer_steps == 2:
            raise RuntimeError("the callback broke")

    def on_validation_end(self, epoch: int, values: Mapping[str, float]) -> None:
        if self.point == "on_validation_end":
            raise KeyError("Accuracy")

    def on_error(self, error: BaseException) -> None:
        self.errors.append(error)

    def __repr__(self) -> str:
        return f"Broken({self.point!r})"


@pytest.mark.parametrize("point", ["on_after_optimizer_step", "on_validation_end"])
def test_an_error_in_a_callback_is_the_runs_error_naming_the_callback_and_point(
    tmp_path: Path, point: str
) -> None:
    """The callback's exception ends the run (TrainingError from it), noted with the callback
    and the point; the callbacks' on_error gets it; experiment.log has it."""
    broken = Broken(point)
    model = TinyRegressor()
    training = quiet(tmp_path, loader(12, 4), loader(4, 4)).metrics(LossMetric())
    with pytest.raises(TrainingError) as raised:
        training.with_callbacks(broken).launch(learner_of(model))
    error = raised.value.__cause__
    assert error is not None and error is broken.errors[0]
    assert f"ember: raised by the callback Broken({point!r}) in {point}" in error.__notes__
    assert "the callback broke" in (tmp_path / "experiment.log").read_text(encoding="utf-8") or (
        point == "on_validation_end"
    )


class StepCounter(Callback):
    """A callback with state: the steps it saw and a running sum of the weights."""

    def __init__(self) -> None:
        self.steps = 0
        self.total = torch.zeros(1, 3)
        self.first_step_seen: int | None = None

    def on_after_optimizer_step(self, step: RunView) -> None:
        if self.first_step_seen is None:
            self.first_step_seen = step.optimizer_steps
        self.steps += 1
        self.total += weight(step.model).detach()

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "total": self.total.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps, self.total = state["steps"], state["total"].clone()


def counted(directory: Path, counter: StepCounter, **settings: Any) -> TinyRegressor:
    torch.manual_seed(0)
    model = TinyRegressor()
    training = (
        quiet(directory, loader(12, 2, shuffle=1), loader(4, 4))
        .metrics(LossMetric())
        .num_epochs(3)
        .with_default_checkpointers()
        .with_callbacks(counter)
    )
    if settings.get("stop_at"):
        training = training.with_callbacks(StopAt(settings["stop_at"]))
    if settings.get("resume"):
        training = training.resume_latest()
    result = training.launch(learner_of(model))
    assert result.error is None, result.traceback
    return model


def test_callback_state_joins_checkpoints_and_a_resumed_run_is_bit_identical(
    tmp_path: Path,
) -> None:
    """A run stopped at step 8 (mid-round) and resumed ends with the callback's state and the
    weights of an uninterrupted run; the state was back before the resumed run's first step."""
    straight = StepCounter()
    model = counted(tmp_path / "a", straight)
    interrupted, resumed = StepCounter(), StepCounter()
    counted(tmp_path / "b", interrupted, stop_at=8)
    assert interrupted.steps == 8
    model_b = counted(tmp_path / "b", resumed, resume=True)
    assert resumed.first_step_seen == 9 and resumed.steps == straight.steps == 18
    assert torch.equal(resumed.total, straight.total)
    assert torch.equal(weight(model_b), weight(model))


def test_a_checkpoint_without_a_callbacks_state_is_refused_naming_it(tmp_path: Path) -> None:
    """Resuming with a stateful callback the checkpoint was written without is refused."""
    counted(tmp_path, StepCounter(), stop_at=3)
    model = TinyRegressor()
    training = (
        quiet(tmp_path, loader(12, 2, shuffle=1), loader(4, 4))
        .metrics(LossMetric())
        .num_epochs(3)
        .with_default_checkpointers()
        .with_callbacks(StepCounter(), Values())
        .resume_latest()
    )
    training.launch(learner_of(model))  # the same callbacks: resumes
    other = (
        quiet(tmp_path, loader(12, 2, shuffle=1), loader(4, 4))
        .metrics(LossMetric())
        .num_epochs(4)
        .with_default_checkpointers()
        .with_callbacks(StepCounter(), StepCounter())
        .resume_latest()
    )
    with pytest.raises(TrainingError) as raised:
        other.launch(learner_of(TinyRegressor()))
    assert "holds no callback state named 'StepCounter#2'" in str(raised.value.__cause__)


class Logs(Callback):
    def on_after_optimizer_step(self, step: RunView) -> None:
        step.log("weight norm", weight(step.model).norm())


def test_step_log_reaches_a_value_metric(tmp_path: Path) -> None:
    """step.log(name, value) in a callback is logged with its batch by ValueMetric(name)."""
    model = TinyRegressor()
    training = quiet(tmp_path, loader(8, 4)).metric_train_numeric(ValueMetric("weight norm"))
    training.with_callbacks(Logs()).launch(learner_of(model))
    lines = read_lines(tmp_path / "train" / "epoch-1" / "weight_norm.log")
    assert len(lines) == 3 and float(lines[1].split(",")[0]) == pytest.approx(
        float(weight(model).detach().norm()), rel=1e-6
    )


def test_a_run_without_per_step_callbacks_calls_nothing_per_step(tmp_path: Path) -> None:
    """No callback, a hooks object, or a callback with run-level points only: the plan's
    per-step methods are empty (the loop tests an empty tuple per step)."""
    model = TinyRegressor()
    for training in (
        quiet(tmp_path, loader(4)),
        quiet(tmp_path, loader(4)).with_hooks(Hooks()),
        quiet(tmp_path, loader(4)).with_callbacks(Values(), Callback()),
    ):
        plan = plan_run(training.config, learner_of(model))
        callbacks = plan.callbacks
        assert not (
            callbacks.batch_start
            or callbacks.before_step
            or callbacks.after_step
            or callbacks.batch_end
        )


def test_run_view_outside_a_step_and_bad_callbacks(tmp_path: Path) -> None:
    """log() outside a train batch names the points to call it from; a class, an object with
    no point, half a state protocol are refused at with_callbacks."""
    seen: list[str] = []

    class LogsAtStart(Callback):
        def on_run_start(self, run: RunView) -> None:
            with pytest.raises(RuntimeError, match="logs with a train batch"):
                run.log("x", 1.0)
            assert run.loss is None and run.iteration == 0 and run.batch is None
            seen.append(repr(run))

    quiet(tmp_path, loader(4)).with_callbacks(LogsAtStart()).launch(learner_of(TinyRegressor()))
    assert seen == ["RunView(epoch=0, iteration=0, optimizer_steps=0, rank=0)"]
    builder = quiet(tmp_path / "b", loader(4))
    with pytest.raises(TypeError, match=r"got the class Recorder: write Recorder\(...\)"):
        builder.with_callbacks(Recorder)
    with pytest.raises(TypeError, match="object has no method of a callback point"):
        builder.with_callbacks(object())

    class Half(Callback):
        def state_dict(self) -> dict[str, Any]:
            return {}

    with pytest.raises(TypeError, match=r"has state_dict\(\) but no load_state_dict\(\)"):
        builder.with_callbacks(Half())
    assert CALLBACK_POINTS[0] == "on_run_start" and CALLBACK_POINTS[-1] == "on_error"
