"""The optimizer window: clipping, mean accumulation and mixed precision, each against a raw
PyTorch loop doing the same thing."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ember.train import (
    CliMetricsRenderer,
    GradNormMetric,
    Learner,
    LearningResult,
    LossMetric,
    MultiDevice,
    SupervisedTraining,
)
from tests.train.fixtures import Batch, TinyRegressor, loader, weight


def train(
    directory: Path,
    configure: Callable[[SupervisedTraining], SupervisedTraining],
    *,
    items: int = 16,
    batch_size: int = 4,
    epochs: int = 2,
    lr: float = 0.1,
    resume: int | None = None,
) -> tuple[TinyRegressor, LearningResult[TinyRegressor]]:
    torch.manual_seed(0)
    model = TinyRegressor()
    builder = (
        SupervisedTraining(directory, loader(items, batch_size), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
    )
    builder = configure(builder)
    if resume is not None:
        builder = builder.with_default_checkpointers().checkpoint(resume)
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), lr))
    assert result.error is None, result.traceback
    return model, result


def raw(
    batches: Iterable[Batch],
    *,
    epochs: int = 2,
    lr: float = 0.1,
    after_backward: Callable[[TinyRegressor], object] = lambda model: None,
    autocast: torch.dtype | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> TinyRegressor:
    """The raw loop: zero_grad, forward (under autocast), backward, hook, (scaler) step."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    batches = list(batches)
    for _ in range(epochs):
        for batch in batches:
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", autocast, enabled=autocast is not None):
                loss = F.mse_loss(model(batch.x), batch.y)
            if scaler is None:
                torch.autograd.backward(loss)
                after_backward(model)
                optimizer.step()
            else:
                torch.autograd.backward(scaler.scale(loss))
                scaler.unscale_(optimizer)
                after_backward(model)
                scaler.step(optimizer)
                scaler.update()
    return model


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(x, y), name


def test_clip_grad_norm_is_a_raw_loops_clip_grad_norm_(tmp_path: Path) -> None:
    """clip_grad_norm clips every step exactly as torch.nn.utils.clip_grad_norm_ does."""
    model, _ = train(tmp_path, lambda b: b.clip_grad_norm(0.05))
    expected = raw(
        loader(16, 4), after_backward=lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)
    )
    assert_same_weights(model, expected)
    unclipped, _ = train(tmp_path / "plain", lambda b: b)
    assert not torch.equal(weight(unclipped), weight(model))  # it did clip


def test_clip_grad_value_and_other_norm_types(tmp_path: Path) -> None:
    """clip_grad_value and a 1-norm clip equal their torch functions in a raw loop."""
    model, _ = train(tmp_path / "value", lambda b: b.clip_grad_value(0.01))
    expected = raw(
        loader(16, 4),
        after_backward=lambda m: torch.nn.utils.clip_grad_value_(m.parameters(), 0.01),
    )
    assert_same_weights(model, expected)
    model, _ = train(tmp_path / "l1", lambda b: b.clip_grad_norm(0.1, norm_type=1.0))
    expected = raw(
        loader(16, 4),
        after_backward=lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.1, 1.0),
    )
    assert_same_weights(model, expected)


def test_an_infinity_norm_clip_is_accepted_as_torch_takes_it(tmp_path: Path) -> None:
    """Issue 29, item 10: clip_grad_norm(0.05, norm_type=inf) (clipping by the largest absolute
    gradient, which torch supports) is accepted and clips as clip_grad_norm_ does; the logged
    configuration says inf."""
    model, _ = train(tmp_path, lambda b: b.clip_grad_norm(0.05, norm_type=math.inf))
    expected = raw(
        loader(16, 4),
        after_backward=lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05, math.inf),
    )
    assert_same_weights(model, expected)
    two_norm, _ = train(tmp_path / "two", lambda b: b.clip_grad_norm(0.05))
    assert not torch.equal(weight(two_norm), weight(model))  # another norm clips otherwise
    config = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert config["clipping"] == ["norm", 0.05, "inf"]


def test_grad_norm_metric_logs_the_pre_clip_norm(tmp_path: Path) -> None:
    """GradNormMetric logs each optimizer step's norm before clipping, as clip_grad_norm_
    returns it."""
    train(tmp_path, lambda b: b.clip_grad_norm(0.05).metric_train_numeric(GradNormMetric()))
    torch.manual_seed(0)
    model = TinyRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for batch in loader(16, 4):
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(F.mse_loss(model(batch.x), batch.y))
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)))
        optimizer.step()
    lines = (tmp_path / "train" / "epoch-1" / "Gradient_Norm.log").read_text().splitlines()
    assert [float(line.split(",")[0]) for line in lines[:-1]] == norms


def test_mean_accumulation_equals_one_big_batch_the_short_window_included(
    tmp_path: Path,
) -> None:
    """grads_accumulation(4, mean=True) over batches of 2 equals batches of 8 (13 items: one
    window of 8 items, then a short one of 5: 2 + 2 + 1)."""
    model, _ = train(tmp_path, lambda b: b.grads_accumulation(4, mean=True), items=13, batch_size=2)
    expected = raw(loader(13, 8))
    for x, y in zip(model.state_dict().values(), expected.state_dict().values(), strict=True):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=1e-7)
    summed, _ = train(tmp_path / "sum", lambda b: b.grads_accumulation(4), items=13, batch_size=2)
    assert not torch.allclose(weight(summed), weight(model))  # the seed's sum


def test_bf16_mixed_is_a_raw_autocast_loop(tmp_path: Path) -> None:
    """bf16-mixed runs the forward under torch.autocast(bfloat16), backward outside it."""
    model, _ = train(tmp_path, lambda b: b.precision("bf16-mixed"))
    assert_same_weights(model, raw(loader(16, 4), autocast=torch.bfloat16))


def test_16_mixed_is_a_raw_grad_scaler_loop(tmp_path: Path) -> None:
    """16-mixed: float16 autocast and torch.amp.GradScaler, as a raw loop uses them."""
    model, _ = train(tmp_path, lambda b: b.precision("16-mixed"))
    expected = raw(loader(16, 4), autocast=torch.float16, scaler=torch.amp.GradScaler("cpu"))
    assert_same_weights(model, expected)


def test_16_mixed_skips_a_step_with_non_finite_gradients(tmp_path: Path) -> None:
    """A step whose gradients overflow is skipped and the scale lowered; it is not a
    NonFiniteLossError (the loss itself is finite)."""
    torch.manual_seed(0)
    model = TinyRegressor()
    before = weight(model).detach().clone()
    calls = {"n": 0}

    def overflow(grad: torch.Tensor) -> torch.Tensor:
        calls["n"] += 1
        return grad * math.inf if calls["n"] == 1 else grad

    weight(model).register_hook(overflow)  # type: ignore[no-untyped-call]  # untyped in torch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    result = (
        SupervisedTraining(tmp_path, loader(4, 4), loader(4, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .precision("16-mixed")
        .launch(Learner(model, optimizer, 0.1))
    )
    assert result.error is None, result.traceback
    assert torch.equal(weight(model), before)  # the only step was skipped
    log = (tmp_path / "experiment.log").read_text()
    assert "Optimizer step 1 skipped: non-finite gradients at loss scale 65536" in log


def test_resume_with_a_grad_scaler_is_bit_identical(tmp_path: Path) -> None:
    """The scaler's state is in every checkpoint: a resumed 16-mixed run ends exactly as an
    uninterrupted one."""
    straight, _ = train(tmp_path / "a", lambda b: b.precision("16-mixed"), epochs=3)
    train(
        tmp_path / "b",
        lambda b: b.precision("16-mixed").with_default_checkpointers(),
        epochs=2,
    )
    resumed, _ = train(tmp_path / "b", lambda b: b.precision("16-mixed"), epochs=3, resume=2)
    assert_same_weights(straight, resumed)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda b: b.precision("fp8"), ValueError, r"precision must be one of '32', 'bf16-mixed'"),
        (lambda b: b.clip_grad_norm(0), ValueError, r"max_norm must be > 0, got 0"),
        (lambda b: b.clip_grad_norm(-1.0), ValueError, r"max_norm must be > 0, got -1.0"),
        (lambda b: b.clip_grad_value("1"), TypeError, r"clip_value must be a real number"),
        (lambda b: b.grads_accumulation(2, mean=1), TypeError, r"mean must be a bool, got 1"),
    ],
)
def test_bad_values_are_refused_at_the_call(
    tmp_path: Path, call: Callable[[SupervisedTraining], Any], error: type, message: str
) -> None:
    """Each builder call names the value and the choices."""
    with pytest.raises(error, match=message):
        call(SupervisedTraining(tmp_path, loader(4), loader(4)))


def test_mixed_precision_reaches_every_device_thread(tmp_path: Path) -> None:
    """Under MultiDevice every device thread runs its forward under the autocast."""
    seen: list[bool] = []

    class Watching(TinyRegressor):
        def train_step(self, batch: Batch) -> Any:
            seen.append(torch.is_autocast_enabled("cpu"))
            return super().train_step(batch)

    torch.manual_seed(0)
    model = Watching()
    result = (
        SupervisedTraining(tmp_path, loader(16, 4), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .precision("bf16-mixed")
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    assert seen and all(seen)
