"""``resume_latest()`` on a run that already finished: it says so and returns its result."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import torch

from ember import CheckpointError, RunDirectoryError
from ember._rundir.end import RUN_END
from ember.extend import Direction, Split
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LossMetric,
    MetricEarlyStoppingStrategy,
    StoppingCondition,
    SupervisedTraining,
    TorchLrScheduler,
)
from tests.train.fixtures import TinyRegressor, loader


def training(run_dir: Path, epochs: int, stream: io.StringIO) -> SupervisedTraining:
    return (
        SupervisedTraining(run_dir, loader(8), loader(4))
        .renderer(CliMetricsRenderer(stream))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .summary()
        .with_default_checkpointers()
        .resume_latest()
    )


def learner(seed: int = 0, lr: float = 0.1) -> Learner[TinyRegressor]:
    torch.manual_seed(seed)
    model = TinyRegressor()
    return Learner(model, torch.optim.SGD(model.parameters()), lr)


def test_rerunning_a_finished_run_says_it_is_complete_and_returns_its_result(
    run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The user's mistake: rerunning the script (resume_latest()) after the run finished."""
    first = training(run_dir, 2, io.StringIO()).launch(learner())
    stream = io.StringIO()
    with caplog.at_level(logging.WARNING, logger="ember"):
        again = training(run_dir, 2, stream).launch(learner(seed=1))
    message = (
        f"resume_latest(): the run in {run_dir} is complete: it reached its last epoch after "
        "epoch 2 of num_epochs=2; nothing is trained and its result is returned. To train on, "
        "ask for more epochs (num_epochs(3) or more)"
    )
    assert message in caplog.text
    assert message in (run_dir / "experiment.log").read_text()
    assert "complete: it reached its last epoch" in stream.getvalue()  # the renderer's warning
    assert again.last_epoch == 2 and again.error is None and again.stop_reason is None
    for mine, theirs in zip(again.model.parameters(), first.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)  # the finished run's weights, not seed 1's
    assert again.summary == first.summary
    assert again.values("valid", "Loss") == first.values("valid", "Loss")
    assert sorted(p.name for p in (run_dir / "train").iterdir()) == [
        "epoch-1",
        "epoch-2",
        "steps.jsonl",
    ]


def test_an_early_stopped_run_is_complete_unless_more_epochs_are_asked_for(
    run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def stopping(epochs: int) -> SupervisedTraining:
        return training(run_dir, epochs, io.StringIO()).early_stopping(
            MetricEarlyStoppingStrategy(
                LossMetric(), Direction.LOWEST, Split.VALID, StoppingCondition(1)
            )
        )

    first = stopping(5).launch(learner(lr=0.0))  # no progress: stops after epoch 2
    assert first.stop_reason is not None and first.last_epoch == 2
    with caplog.at_level(logging.WARNING, logger="ember"):
        again = stopping(5).launch(learner(lr=0.0))
    assert f"it stopped early ({first.stop_reason})" in caplog.text
    assert again.last_epoch == first.last_epoch and again.stop_reason == first.stop_reason
    caplog.clear()
    more = stopping(7).launch(learner(lr=0.0))  # more epochs than the run had: trains on
    assert "is complete" not in caplog.text
    assert more.last_epoch > first.last_epoch


def test_an_interrupted_run_is_not_complete(run_dir: Path) -> None:
    """Stopped by the user: no end is recorded, resume_latest() trains the rest."""
    builder = training(run_dir, 3, io.StringIO())
    interrupter = builder.interrupter()
    model = learner()
    calls = 0

    def stop_in_epoch_2(batch: object) -> None:
        nonlocal calls
        calls += 1
        if calls == 3:
            interrupter.stop("enough")

    model.model.on_train_step = stop_in_epoch_2
    assert builder.launch(model).last_epoch == 1
    assert not (run_dir / RUN_END).exists()
    assert training(run_dir, 3, io.StringIO()).launch(learner()).last_epoch == 3
    assert (run_dir / RUN_END).is_file() and not (run_dir / "checkpoint" / RUN_END).exists()


def tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


@pytest.mark.parametrize("damaged", [False, True])
def test_a_refused_checkpoint_request_leaves_a_finished_run_as_it_was(
    run_dir: Path, damaged: bool
) -> None:
    """The user's mistake: checkpoint(99) on a finished run (no such checkpoint), or
    checkpoint(2) whose model file was damaged: the launch is refused and the run directory,
    run-end.json included, is byte for byte what the finished run left."""
    SupervisedTraining(run_dir, loader(8), loader(4)).renderer(
        CliMetricsRenderer(io.StringIO())
    ).metrics(LossMetric()).num_epochs(2).with_default_checkpointers().launch(learner())
    if damaged:
        model = run_dir / "checkpoint" / "model-2.safetensors"
        model.write_bytes(model.read_bytes()[:-1] + b"\x00")
    before = tree(run_dir)
    assert RUN_END in {Path(name).name for name in before}
    request = (
        SupervisedTraining(run_dir, loader(8), loader(4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(3)
        .with_default_checkpointers()
        .checkpoint(2 if damaged else 99)
    )
    problem = "model-2.safetensors is damaged" if damaged else "there is none"
    with pytest.raises(CheckpointError, match=f"no complete checkpoint of epoch .*{problem}"):
        request.launch(learner())
    assert tree(run_dir) == before


def test_rerunning_a_finished_run_returns_its_learner_with_the_optimizer_and_scheduler(
    run_dir: Path,
) -> None:
    """The fault: resume_latest() on a finished run restored the weights only, the optimizer
    came back empty; now Adam's moments, the scheduler and the lr are as the run left them."""

    def adam_learner(seed: int) -> Learner[TinyRegressor]:
        torch.manual_seed(seed)
        model = TinyRegressor()
        optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return Learner(model, optimizer, TorchLrScheduler(scheduler, interval="step"))

    first = adam_learner(0)
    training(run_dir, 2, io.StringIO()).launch(first)
    again = adam_learner(1)
    training(run_dir, 2, io.StringIO()).launch(again)
    ran, restored = first.optimizer.state_dict(), again.optimizer.state_dict()
    assert ran["state"] and ran["state"].keys() == restored["state"].keys()
    for param, values in ran["state"].items():
        for name, value in values.items():
            assert torch.equal(value, restored["state"][param][name]), (param, name)
    assert ran["param_groups"] == restored["param_groups"]
    assert first.lr_scheduler is not None and again.lr_scheduler is not None
    assert again.lr_scheduler.state_dict() == first.lr_scheduler.state_dict()
    assert again.lr_current == first.lr_current


def test_a_0_2_0_run_s_end_record_beside_its_checkpoints_is_still_read(
    run_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run finished by 0.2.0 recorded its end in checkpoint/run-end.json: resume_latest()
    still finds it complete, and a resume asking for more clears that record while it
    trains."""
    training(run_dir, 2, io.StringIO()).launch(learner())
    (run_dir / RUN_END).rename(run_dir / "checkpoint" / RUN_END)  # the 0.2.0 layout
    with caplog.at_level(logging.WARNING, logger="ember"):
        again = training(run_dir, 2, io.StringIO()).launch(learner(seed=1))
    assert "is complete: it reached its last epoch after epoch 2" in caplog.text
    assert again.last_epoch == 2
    seen: list[bool] = []
    model = learner()
    model.model.on_train_step = lambda batch: seen.append(
        (run_dir / "checkpoint" / RUN_END).exists()
    )
    assert training(run_dir, 3, io.StringIO()).launch(model).last_epoch == 3
    assert seen and not any(seen)  # not taken for finished while it trains
    assert (run_dir / RUN_END).is_file() and not (run_dir / "checkpoint" / RUN_END).exists()


def test_resume_latest_into_a_directory_holding_no_run_warns_and_trains_from_scratch(
    tmp_path: Path,
) -> None:
    """Issue 38 item 6, the user's case: resume_latest() into a mistyped directory. It trains
    from scratch (a preemptible script's first launch does the same), and says so on the
    screen and in experiment.log, naming the directory."""
    SupervisedTraining(tmp_path / "runs" / "mnist", loader(8), loader(4)).renderer(
        CliMetricsRenderer(io.StringIO())
    ).metrics(LossMetric()).with_default_checkpointers().launch(learner())
    typo = tmp_path / "runs" / "mnsit"
    stream = io.StringIO()
    result = training(typo, 2, stream).launch(learner())
    assert result.last_epoch == 2 and result.directory == typo
    warning = (
        f"resume_latest(): no checkpoint in {typo / 'checkpoint'} to resume from: training "
        "starts from scratch, at epoch 1 (if a run should be there, check the directory's name)"
    )
    screen = stream.getvalue().splitlines()
    assert f"Warning: {warning}" in screen
    assert screen.index(f"Warning: {warning}") < screen.index("Starting training for 2 epochs.")
    assert f"WARNING ember.train: {warning}\n" in (typo / "experiment.log").read_text()


def test_resume_latest_on_a_run_that_finished_without_checkpoints_is_refused(
    run_dir: Path,
) -> None:
    """A run that kept no checkpoints has nothing to resume from or return, and training from
    scratch in its directory would overwrite it: resume_latest() there is refused, naming the
    run and what to do, and its files stay as they were."""
    SupervisedTraining(run_dir, loader(8), loader(4)).renderer(
        CliMetricsRenderer(io.StringIO())
    ).metrics(LossMetric()).num_epochs(2).launch(learner())
    before = tree(run_dir)
    with pytest.raises(RunDirectoryError) as raised:
        training(run_dir, 2, io.StringIO()).launch(learner())
    message = str(raised.value)
    finished = f"the run in {str(run_dir)!r} finished (epoch 2, num_epochs=2) without checkpoints"
    assert finished in message
    assert "drop resume_latest()" in message and "overwrite()" in message
    after = tree(run_dir)
    log = after.pop("experiment.log")  # the refused attempt is told there, after the run's
    assert log.startswith(before.pop("experiment.log")) and after == before
