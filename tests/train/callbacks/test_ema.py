"""EMA: torch's moving average of the weights, equal to a hand EMA, exact across a resume."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.train import (
    EMA,
    CliMetricsRenderer,
    Learner,
    LossMetric,
    SupervisedTraining,
    load_checkpoint,
)
from tests.train.callbacks.test_points import StopAt
from tests.train.fixtures import TinyRegressor, loader, read_lines


class Normed(TinyRegressor):
    """A regressor with a batch norm: buffers to average too."""

    def __init__(self) -> None:
        super().__init__(nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 1)))


def training(directory: Path, ema: EMA, **settings: Any) -> tuple[Any, Normed]:
    torch.manual_seed(0)
    model = Normed()
    builder = (
        SupervisedTraining(directory, loader(24, 4, shuffle=5), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(3)
        .with_callbacks(ema)
    )
    if settings.get("checkpoints"):
        builder = builder.with_default_checkpointers()
    if settings.get("stop_at"):
        builder = builder.with_callbacks(StopAt(settings["stop_at"]))
    if settings.get("resume"):
        builder = builder.resume_latest()
    result = builder.launch(Learner(model, torch.optim.Adam(model.parameters(), lr=0.01)))
    assert result.error is None, result.traceback
    return result, model


def hand_ema(decay: float) -> tuple[dict[str, torch.Tensor], Normed]:
    """A raw loop over the same batches with a hand-written EMA of the parameters and float
    buffers: the first update copies, each later one is decay * ema + (1 - decay) * w."""
    torch.manual_seed(0)
    model = Normed()
    optim = torch.optim.Adam(model.parameters(), lr=0.01)
    average: dict[str, torch.Tensor] | None = None
    train = loader(24, 4, shuffle=5)
    for _ in range(3):
        model.train()
        for batch in train:
            optim.zero_grad()
            F.mse_loss(model(batch.x), batch.y).backward()  # type: ignore[no-untyped-call]  # torch\'s, untyped
            optim.step()
            current = {
                **{n: p.detach().clone() for n, p in model.named_parameters()},
                **{n: b.clone() for n, b in model.named_buffers() if b.is_floating_point()},
            }
            if average is None:
                average = current
            else:
                average = {n: decay * average[n] + (1 - decay) * current[n] for n in average}
    assert average is not None
    return average, model


def test_ema_equals_a_hand_ema_of_a_raw_loop(tmp_path: Path) -> None:
    """EMA(0.9).averaged holds, within 1e-5, a hand EMA of a raw loop's weights and buffers;
    the model itself trains exactly as without it."""
    ema = EMA(0.9)
    _, model = training(tmp_path, ema)
    expected, raw = hand_ema(0.9)
    assert ema.averaged is not None
    averaged: dict[str, torch.Tensor] = dict(ema.averaged.module.named_parameters())
    averaged.update(dict(ema.averaged.module.named_buffers()))
    for name, tensor in expected.items():
        torch.testing.assert_close(averaged[name], tensor, rtol=0, atol=1e-5)
    for (name, mine), theirs in zip(
        model.state_dict().items(), raw.state_dict().values(), strict=True
    ):
        assert torch.equal(mine, theirs), name


def test_ema_is_bit_identical_across_a_resume(tmp_path: Path) -> None:
    """Stopped at step 7 (mid-round, a checkpoint there) and resumed, the average and the
    weights equal an uninterrupted run's bit for bit."""
    straight = EMA(0.8)
    _, model = training(tmp_path / "a", straight, checkpoints=True)
    training(tmp_path / "b", EMA(0.8), checkpoints=True, stop_at=7)
    resumed = EMA(0.8)
    _, model_b = training(tmp_path / "b", resumed, checkpoints=True, resume=True)
    assert straight.averaged is not None and resumed.averaged is not None
    for (name, a), b in zip(
        straight.averaged.state_dict().items(), resumed.averaged.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    for (name, a), b in zip(model.state_dict().items(), model_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_use_averaged_validates_checkpoints_and_returns_the_average(tmp_path: Path) -> None:
    """With use_averaged the valid Loss is the average's, the round-end checkpoints hold the
    average, launch returns it, and training is the same as without it (a resume from a
    round end too)."""
    plain = EMA(0.8)
    _, trained = training(tmp_path / "plain", plain, checkpoints=True)
    ema = EMA(0.8, use_averaged=True)
    result, model = training(tmp_path / "avg", ema, checkpoints=True)
    assert ema.averaged is not None and plain.averaged is not None
    averaged = {  # the weights and float buffers (a step counter is not averaged)
        name: tensor
        for name, tensor in ema.averaged.module.state_dict().items()
        if tensor.is_floating_point()
    }
    for name, tensor in averaged.items():
        assert torch.equal(model.state_dict()[name], tensor), name
    saved = load_checkpoint(tmp_path / "avg", 3, into=Normed()).state_dict()
    for name, tensor in averaged.items():
        assert torch.equal(saved[name], tensor), name
    # the averaged model's validation: evaluate it by hand
    module = ema.averaged.module.eval()
    with torch.no_grad():
        batches = list(loader(8, 4))
        losses = [float(F.mse_loss(module(b.x), b.y)) for b in batches]
    final = read_lines(tmp_path / "avg" / "valid" / "epoch-3" / "Loss.log")[-1]
    assert float(final.split(",")[0]) == pytest.approx(sum(losses) / len(losses), rel=1e-6)
    # the training weights went on as without use_averaged: the averages agree
    for name, tensor in plain.averaged.state_dict().items():
        assert torch.equal(ema.averaged.state_dict()[name], tensor), name
    assert result.stop_reason is None and trained is not model


def test_ema_resumes_from_a_round_end_that_holds_the_average(tmp_path: Path) -> None:
    """A run with use_averaged resumed from its epoch-2 checkpoint (which holds the average)
    trains on the training weights and ends as the uninterrupted one."""
    straight = EMA(0.8, use_averaged=True)
    _, model = training(tmp_path / "a", straight, checkpoints=True)
    torch.manual_seed(0)
    first = Normed()
    builder = (
        SupervisedTraining(tmp_path / "b", loader(24, 4, shuffle=5), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(2)
        .with_default_checkpointers()
        .with_callbacks(EMA(0.8, use_averaged=True))
    )
    builder.launch(Learner(first, torch.optim.Adam(first.parameters(), lr=0.01)))
    resumed = EMA(0.8, use_averaged=True)
    _, model_b = training(tmp_path / "b", resumed, checkpoints=True, resume=True)
    for (name, a), b in zip(model.state_dict().items(), model_b.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_ema_refuses_bad_settings() -> None:
    """decay outside [0, 1) and non-bool switches are refused, naming the value."""
    with pytest.raises(ValueError, match="decay must be < 1"):
        EMA(1.0)
    with pytest.raises(TypeError, match="use_averaged must be a bool"):
        EMA(0.9, use_averaged=1)  # type: ignore[arg-type]
