"""Closure optimizers (LBFGS): stepped with the unit's loss function, one forward and one
backward per evaluation the optimizer asks for, none wasted (examples/time_sequence_prediction)."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ember.train import (
    CliMetricsRenderer,
    DistributedDataParallel,
    Learner,
    MultiDevice,
    SupervisedTraining,
)
from tests.train.fixtures import TinyRegressor, loader, read_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    return importlib.import_module("time_sequence_prediction")


def raw_lbfgs(example: ModuleType, epochs: int) -> tuple[Any, list[float]]:
    """The original's loop: LBFGS stepped with a hand-written closure, one batch an epoch."""
    torch.manual_seed(0)
    model = example.Sequence()
    optim = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=10)
    losses = []
    for _ in range(epochs):
        for inputs, targets in example.loader(16, 1):

            def closure(x: torch.Tensor = inputs, y: torch.Tensor = targets) -> torch.Tensor:
                optim.zero_grad()
                loss = F.mse_loss(model(x), y)
                torch.autograd.backward(loss)
                return loss

            losses.append(optim.step(closure).detach().item())  # type: ignore[no-untyped-call]
    return model, losses


def test_lbfgs_equals_a_raw_loop_with_one_evaluation_per_closure_call(
    example: ModuleType, tmp_path: Path
) -> None:
    """A plain model with F.mse_loss and LBFGS: the same losses and weights as the raw loop,
    and exactly as many forward passes in training (the raw loop's closure calls; validation
    adds one per epoch)."""
    epochs = 3
    result = example.main(["--epochs", str(epochs), "--dir", str(tmp_path)])
    assert result.error is None, result.traceback
    raw, losses = raw_lbfgs(example, epochs)
    assert raw.calls > 2 * epochs  # LBFGS asked for several evaluations per step
    assert result.model.calls - epochs == raw.calls  # one validation batch per epoch
    logged = [
        float(read_lines(tmp_path / "train" / f"epoch-{e}" / "Loss.log")[0].split(",")[0])
        for e in range(1, epochs + 1)
    ]
    assert logged == losses
    for ours, theirs in zip(
        result.model.state_dict().values(), raw.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs)


def test_a_model_of_its_own_steps_is_stepped_with_the_closure_too(tmp_path: Path) -> None:
    """A LearnerModel with the default optimize and an LBFGS factory: the loop hands LBFGS the
    unit's loss function (the factory's class is known before the optimizer is built)."""
    torch.manual_seed(0)
    model = TinyRegressor()
    calls = 0

    def count(batch: object) -> None:
        nonlocal calls
        calls += 1

    model.on_train_step = count
    learner = Learner(model, lambda params: torch.optim.LBFGS(params, max_iter=4))
    result = (
        SupervisedTraining(tmp_path, loader(8, 8), loader(4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .launch(learner)
    )
    assert result.error is None, result.traceback
    assert learner.steps_with_closure
    assert 1 < calls <= 5  # LBFGS's evaluations for one step: at most max_iter * 1.25


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"grads_accumulation": 2}, r"grads_accumulation\(n\) cannot go with"),
        ({"clip_grad_norm": 1.0}, "clipping cannot go with"),
        ({"precision": "16-mixed"}, "GradScaler does not step closure optimizers"),
        ({"with_training_strategy": DistributedDataParallel()}, "train on one process"),
    ],
)
def test_what_a_closure_cannot_go_with_is_refused_at_launch(
    tmp_path: Path, option: dict[str, Any], message: str
) -> None:
    """Accumulation, clipping, a gradient scaler and data-parallel processes: refused before
    anything runs, naming why."""
    model = TinyRegressor()
    builder = SupervisedTraining(tmp_path, loader(8), loader(4))
    for name, value in option.items():
        builder = getattr(builder, name)(value)
    with pytest.raises(ValueError, match=message):
        builder.launch(Learner(model, torch.optim.LBFGS(model.parameters())))
    assert not (tmp_path / "train").exists()


def test_several_devices_run_every_evaluation_on_every_replica(tmp_path: Path) -> None:
    """Under MultiDevice each later evaluation runs on the replicas given the parameters LBFGS
    just changed: two CPU devices, each with its half of the batch, equal a raw LBFGS loop on
    the sum of the halves' losses (the devices' gradients and losses are summed)."""
    torch.manual_seed(0)
    model = TinyRegressor()
    learner = Learner(model, torch.optim.LBFGS(model.parameters(), max_iter=5))
    result = (
        SupervisedTraining(tmp_path, loader(8, 8), loader(4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .num_epochs(2)
        .launch(learner)
    )
    assert result.error is None, result.traceback
    torch.manual_seed(0)
    raw = TinyRegressor()
    optim = torch.optim.LBFGS(raw.parameters(), max_iter=5)
    (batch,) = list(loader(8, 8))
    halves = [(batch.x[:4], batch.y[:4]), (batch.x[4:], batch.y[4:])]

    def closure() -> torch.Tensor:
        optim.zero_grad()
        losses = [F.mse_loss(raw(x), y) for x, y in halves]
        for loss in losses:
            torch.autograd.backward(loss)
        return losses[0] + losses[1]

    for _ in range(2):
        optim.step(closure)  # type: ignore[no-untyped-call]
    for ours, theirs in zip(model.parameters(), raw.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_a_closure_optimizers_run_resumes_exactly(example: ModuleType, tmp_path: Path) -> None:
    """LBFGS's state (its history of directions) is checkpointed as safetensors + JSON: a run
    stopped after epoch 2 and resumed to 3 ends with the weights of an uninterrupted one."""

    def run(directory: Path, epochs: int, resume: bool = False) -> Any:
        torch.manual_seed(0)
        model = example.Sequence()
        optim = torch.optim.LBFGS(model.parameters(), lr=0.8, max_iter=10)
        builder = (
            SupervisedTraining(directory, example.loader(16, 1), example.loader(4, 2))
            .renderer(CliMetricsRenderer(io.StringIO()))
            .with_default_checkpointers()
            .num_epochs(epochs)
        )
        if resume:
            builder = builder.resume_latest()
        result = builder.launch(Learner(model, optim, loss=F.mse_loss))
        assert result.error is None, result.traceback
        return model

    run(tmp_path / "resumed", 2)
    resumed = run(tmp_path / "resumed", 3, resume=True)
    straight = run(tmp_path / "straight", 3)
    for ours, theirs in zip(resumed.parameters(), straight.parameters(), strict=True):
        assert torch.equal(ours, theirs)
