"""The Learner's learning rates: per param group, without a scheduler, and schedulers that
step per epoch or on a validation metric, each against a raw PyTorch loop."""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ember.train import (
    CliMetricsRenderer,
    Learner,
    LossMetric,
    SupervisedTraining,
    TorchLrScheduler,
    _session,
)
from tests.train.fixtures import TinyRegressor, bias, loader, weight


def grouped(model: TinyRegressor) -> torch.optim.SGD:
    """SGD with the weight at 1e-3 and the bias at 1e-2 (a body and a head)."""
    return torch.optim.SGD(
        [
            {"params": [weight(model)], "lr": 1e-3},
            {"params": [bias(model)], "lr": 1e-2},
        ]
    )


def launch(directory: Path, model: TinyRegressor, optim: Any, lr: Any, epochs: int = 2) -> None:
    result = (
        SupervisedTraining(directory, loader(16, 4), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .launch(Learner(model, optim, lr))
    )
    assert result.error is None, result.traceback


def raw_sgd(groups: list[float], epochs: int = 2) -> TinyRegressor:
    torch.manual_seed(0)
    model = TinyRegressor()
    optimizer = torch.optim.SGD(
        [
            {"params": [weight(model)], "lr": groups[0]},
            {"params": [bias(model)], "lr": groups[1]},
        ]
    )
    for _ in range(epochs):
        for batch in loader(16, 4):
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(F.mse_loss(model(batch.x), batch.y))
            optimizer.step()
    return model


def test_without_a_scheduler_every_group_keeps_its_own_lr(tmp_path: Path) -> None:
    """Learner(model, optim) trains each param group at the lr it was built with."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = grouped(model)
    launch(tmp_path, model, optim, None)
    assert [g["lr"] for g in optim.param_groups] == [1e-3, 1e-2]
    expected = raw_sgd([1e-3, 1e-2])
    assert torch.equal(weight(model), weight(expected))
    assert torch.equal(bias(model), bias(expected))


def test_a_constant_lr_is_group_0s_and_the_others_keep_their_ratio(tmp_path: Path) -> None:
    """A float sets group 0's lr; group 1 keeps ten times it, as it was built."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = grouped(model)
    launch(tmp_path, model, optim, 5e-4)
    assert optim.param_groups[0]["lr"] == 5e-4
    assert optim.param_groups[1]["lr"] == pytest.approx(5e-3)


def test_step_lr_per_epoch_as_pytorch_examples_mnist(tmp_path: Path) -> None:
    """TorchLrScheduler(StepLR(step_size=1), interval="epoch") halves the lr once per epoch,
    as scheduler.step() at the end of each epoch of a raw loop."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optim, step_size=1, gamma=0.5)
    launch(tmp_path, model, optim, TorchLrScheduler(scheduler, interval="epoch"), epochs=3)
    torch.manual_seed(0)
    expected = TinyRegressor()
    raw_optim = torch.optim.SGD(expected.parameters(), lr=0.1)
    raw_scheduler = torch.optim.lr_scheduler.StepLR(raw_optim, step_size=1, gamma=0.5)
    for _ in range(3):
        for batch in loader(16, 4):
            raw_optim.zero_grad(set_to_none=True)
            torch.autograd.backward(F.mse_loss(expected(batch.x), batch.y))
            raw_optim.step()
        raw_scheduler.step()
    assert torch.equal(weight(model), weight(expected))
    assert optim.param_groups[0]["lr"] == raw_optim.param_groups[0]["lr"] == 0.1 / 8


def plateau_run(directory: Path, epochs: int, resume: int | None = None) -> TinyRegressor:
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = torch.optim.SGD(model.parameters(), lr=0.5)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optim, factor=0.5, patience=0)
    builder = (
        SupervisedTraining(directory, loader(16, 4, shuffle=1), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .with_default_checkpointers()
    )
    if resume is not None:
        builder = builder.checkpoint(resume)
    result = builder.launch(Learner(model, optim, TorchLrScheduler(plateau, monitor="Loss")))
    assert result.error is None, result.traceback
    return model


def test_reduce_lr_on_plateau_steps_on_the_valid_loss_and_resumes_exactly(
    tmp_path: Path,
) -> None:
    """ReduceLROnPlateau is stepped after each validation with the epoch's valid Loss; a
    resume restores its state and ends as an uninterrupted run."""
    straight = plateau_run(tmp_path / "a", 5)
    plateau_run(tmp_path / "b", 2)
    resumed = plateau_run(tmp_path / "b", 5, resume=2)
    assert torch.equal(weight(straight), weight(resumed))


def test_plateau_scheduler_needs_a_registered_valid_metric(tmp_path: Path) -> None:
    """Without monitor: a TypeError naming it; a monitor not on the valid split: refused at
    launch, before training, listing the registered names."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = torch.optim.SGD(model.parameters(), lr=0.5)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optim)
    with pytest.raises(TypeError, match="monitor='Loss'"):
        Learner(model, optim, plateau)
    learner = Learner(model, optim, TorchLrScheduler(plateau, monitor="Acuracy"))
    builder = SupervisedTraining(tmp_path, loader(4), loader(4)).metrics(LossMetric())
    with pytest.raises(ValueError, match=r"'Acuracy'.*registered: \['Loss'\]"):
        builder.launch(learner)
    assert not (tmp_path / "train").exists()
    with pytest.raises(ValueError, match="interval must be 'step' or 'epoch', got 'batch'"):
        TorchLrScheduler(torch.optim.lr_scheduler.StepLR(optim, 1), interval="batch")


def raw_step_lr(interval: str, epochs: int = 2) -> tuple[TinyRegressor, Any, Any]:
    """A raw loop with ``StepLR(step_size=1, gamma=0.7)`` stepped after every optimizer step or
    at every epoch's end: the model, the optimizer and the scheduler it leaves."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)
    for _ in range(epochs):
        for batch in loader(16, 4):
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(F.mse_loss(model(batch.x), batch.y))
            optimizer.step()
            if interval == "step":
                scheduler.step()
        if interval == "epoch":
            scheduler.step()
    return model, optimizer, scheduler


@pytest.mark.parametrize("given", ["bare", "step", "epoch"])
def test_a_torch_scheduler_ends_where_a_raw_loop_leaves_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    """pytorch/examples' StepLR(step_size=1, gamma=0.7), handed to the Learner bare or wrapped
    with an interval: the weights, the optimizer's lr and the scheduler's state after training
    are a raw loop's bit for bit (they were one scheduler step behind); a bare scheduler says at
    launch which interval it runs at and how to choose the other, an explicit one is silent."""
    monkeypatch.setattr(_session, "_TOLD", set())  # no notice shown yet in this process
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optim, step_size=1, gamma=0.7)
    lr = scheduler if given == "bare" else TorchLrScheduler(scheduler, interval=given)
    stream = io.StringIO()
    with caplog.at_level(logging.INFO, logger="ember"):
        result = (
            SupervisedTraining(tmp_path, loader(16, 4), loader(8, 4))
            .renderer(CliMetricsRenderer(stream))
            .metrics(LossMetric())
            .num_epochs(2)
            .launch(Learner(model, optim, lr))
        )
    assert result.error is None, result.traceback
    expected, raw_optim, raw_scheduler = raw_step_lr("epoch" if given == "epoch" else "step")
    assert torch.equal(weight(model), weight(expected)) and torch.equal(bias(model), bias(expected))
    assert [g["lr"] for g in optim.param_groups] == [g["lr"] for g in raw_optim.param_groups]
    assert scheduler.state_dict() == raw_scheduler.state_dict()
    told = "StepLR handed to the Learner is stepped after every optimizer step"
    hint = 'TorchLrScheduler(scheduler, interval="epoch")'
    for where in (caplog.text, stream.getvalue(), (tmp_path / "experiment.log").read_text()):
        assert (told in where and hint in where) == (given == "bare")
