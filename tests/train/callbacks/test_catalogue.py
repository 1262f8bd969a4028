"""The catalogue on the public callbacks: SWA, max_time, the debugging modes, the profiler,
and lr_find, each against the torch code it wraps or the raw loop it stands for."""

from __future__ import annotations

import io
import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from ember.train import (
    SWA,
    Callback,
    CliMetricsRenderer,
    Learner,
    LossMetric,
    Profiler,
    RunView,
    SupervisedTraining,
    lr_find,
)
from tests.train.fixtures import TinyRegressor, loader, read_lines


def quiet(directory: Path, train: Any, valid: Any = None) -> SupervisedTraining:
    return SupervisedTraining(directory, train, valid).renderer(CliMetricsRenderer(io.StringIO()))


class Normed(nn.Module):
    """A plain model with a batch norm (update_bn has statistics to recompute)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def pairs(count: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(count, 3, generator=generator)
    return list(zip(x, x.sum(dim=1, keepdim=True), strict=True))


def torch_loader(count: int) -> torch.utils.data.DataLoader[Any]:
    data: Any = pairs(count)  # a list is a map-style dataset
    return torch.utils.data.DataLoader(data, batch_size=4)


def test_swa_equals_torchs_recipe(tmp_path: Path) -> None:
    """SWA(0.05, start_epoch=2, anneal_epochs=2) ends with the weights and batch-norm
    statistics of torch's swa_utils recipe (AveragedModel, SWALR, update_bn) in a raw loop."""
    torch.manual_seed(0)
    model = Normed()
    swa = SWA(0.05, start_epoch=2, anneal_epochs=2)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.mse_loss)
    result = quiet(tmp_path, torch_loader(16)).num_epochs(4).with_callbacks(swa).launch(learner)
    assert result.error is None, result.traceback
    torch.manual_seed(0)
    raw = Normed()
    optim = torch.optim.SGD(raw.parameters(), lr=0.1)
    averaged = AveragedModel(raw)
    scheduler = SWALR(optim, swa_lr=0.05, anneal_epochs=2)
    for epoch in range(1, 5):
        raw.train()
        for x, y in torch_loader(16):
            optim.zero_grad()
            F.mse_loss(raw(x), y).backward()  # type: ignore[no-untyped-call]  # torch\'s, untyped
            optim.step()
        if epoch >= 2:
            averaged.update_parameters(raw)
            scheduler.step()
    update_bn(torch_loader(16), averaged)
    expected = averaged.module.state_dict()
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=1e-6, msg=name)
    assert swa.averaged is not None and int(swa.averaged.n_averaged) == 3


def test_swa_resumes_bit_identically(tmp_path: Path) -> None:
    """A SWA run stopped after epoch 3 (its checkpoint) and resumed ends as the uninterrupted
    one: the average, the scheduler and the lrs come back."""

    def run(directory: Path, epochs: int, resume: bool) -> nn.Module:
        torch.manual_seed(0)
        model = Normed()
        learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.mse_loss)
        training = quiet(directory, torch_loader(16), torch_loader(8)).metrics(LossMetric())
        training = training.num_epochs(epochs).with_default_checkpointers()
        training = training.with_callbacks(SWA(0.05, start_epoch=2, anneal_epochs=3))
        if resume:
            training = training.resume_latest()
        assert training.launch(learner).error is None
        return model

    straight = run(tmp_path / "a", 5, False)
    run(tmp_path / "b", 3, False)
    resumed = run(tmp_path / "b", 5, True)
    for (name, a), b in zip(
        straight.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_max_time_stops_a_long_run_and_says_why(tmp_path: Path) -> None:
    """max_time(0.5) ends a run asked for 10,000 epochs after the step past the budget: the
    reason names the budget and the step, a mid-round checkpoint is there, and a resume goes
    on from it."""
    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.01))
    training = (
        quiet(tmp_path, loader(64, 4))
        .metric_train_numeric(LossMetric())
        .num_epochs(10_000)
        .with_default_checkpointers()
        .max_time(0.5)
    )
    result = training.launch(learner)
    assert result.stop_reason is not None
    assert result.stop_reason.startswith("max_time: the time budget of 0.5s ran out (after step ")
    step = int(result.stop_reason.rsplit("step ", 1)[1].rstrip(")"))
    assert 0 < step < 160_000
    assert list((tmp_path / "checkpoint").glob(f"step-{step}/manifest-*.json"))
    again = training.resume_latest().launch(learner)
    assert again.stop_reason is not None and "ran out" in again.stop_reason
    assert json.loads((tmp_path / "config.json").read_text())["max_time"] == 0.5


def test_max_time_is_refused_when_not_a_positive_number(tmp_path: Path) -> None:
    builder = quiet(tmp_path, loader(4))
    with pytest.raises(ValueError, match="max_time must be > 0"):
        builder.max_time(0)
    with pytest.raises(TypeError, match="max_time must be a real number"):
        builder.max_time("1h")  # type: ignore[arg-type]


def test_fast_dev_run_takes_one_step_and_keeps_nothing(tmp_path: Path) -> None:
    """fast_dev_run(): one train batch (one optimizer step) and one valid batch, every metric
    and callback run, and the run directory never created."""
    seen: list[int] = []

    class Steps(Callback):
        def on_after_optimizer_step(self, step: RunView) -> None:
            seen.append(step.optimizer_steps)

    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    directory = tmp_path / "run"
    training = (
        quiet(directory, loader(40, 4), loader(40, 4))
        .metrics(LossMetric())
        .num_epochs(5)
        .with_default_checkpointers()
        .summary()
        .with_callbacks(Steps())
        .fast_dev_run()
    )
    result = training.launch(learner)
    assert result.error is None, result.traceback
    assert seen == [1] and result.last_epoch == 1 and result.directory is None
    assert not directory.exists()


def test_limit_batches_trains_and_validates_on_the_first_batches(tmp_path: Path) -> None:
    """limit_batches(train=3, valid=2): 3 Loss lines per train epoch, 2 per valid one, the
    batches the first of each shuffled pass; a second epoch takes the next pass's first."""
    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    training = quiet(tmp_path, loader(40, 4, shuffle=1), loader(40, 4)).metrics(LossMetric())
    training.num_epochs(2).limit_batches(train=3, valid=2).launch(learner)
    for epoch in (1, 2):
        assert len(read_lines(tmp_path / "train" / f"epoch-{epoch}" / "Loss.log")) == 4
        assert len(read_lines(tmp_path / "valid" / f"epoch-{epoch}" / "Loss.log")) == 3


def test_overfit_batches_trains_and_validates_on_the_same_items(tmp_path: Path) -> None:
    """overfit_batches(2): every round trains on the first 2 batches' items and validates on
    them: the valid Loss falls to near zero on a learnable target."""
    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    training = quiet(tmp_path, loader(400, 4, shuffle=1), loader(40, 4)).metrics(LossMetric())
    result = training.num_epochs(60).overfit_batches(2).launch(learner)
    assert len(read_lines(tmp_path / "train" / "epoch-1" / "Loss.log")) == 3
    assert result.values("valid", "Loss")[60] < 1e-3


def test_profiler_writes_chrome_traces_of_the_chosen_steps(tmp_path: Path) -> None:
    """Profiler(wait=1, warmup=1, active=2) writes one trace in DIR/profiler, JSON that
    Chrome's viewer and TensorBoard read, with the two active steps as ProfilerStep#2 and #3."""
    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    profiler = Profiler(wait=1, warmup=1, active=2)
    quiet(tmp_path, loader(40, 4)).with_callbacks(profiler).launch(learner)
    traces = list((tmp_path / "profiler").glob("rank0.*.pt.trace.json"))
    assert len(traces) == 1
    events = json.loads(traces[0].read_text(encoding="utf-8"))["traceEvents"]
    steps = sorted({e["name"] for e in events if e.get("name", "").startswith("ProfilerStep#")})
    assert steps == ["ProfilerStep#2", "ProfilerStep#3"]
    assert any(e.get("name") == "aten::linear" for e in events)
    with pytest.raises(ValueError, match="a folder inside the run directory"):
        Profiler(directory=os.sep + "tmp")


def test_lr_find_leaves_everything_as_it_was_and_suggests_an_lr(tmp_path: Path) -> None:
    """The range test's losses are a raw loop's with the same lrs; afterwards the weights, the
    optimizer's state and the RNG states are bit for bit what they were; the suggestion lies
    inside the range and the plot is drawn."""
    torch.manual_seed(0)
    model = Normed()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    learner = Learner(model, optimizer, loss=F.mse_loss)
    training = quiet(tmp_path, torch_loader(400)).metrics(LossMetric())
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    optim_before = json.dumps(optimizer.state_dict(), default=str)
    numpy_state: Any = np.random.get_state()
    rng = (torch.get_rng_state(), random.getstate(), numpy_state[1].copy())
    found = lr_find(training, learner, min_lr=1e-5, max_lr=1.0, num_steps=60)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    assert json.dumps(optimizer.state_dict(), default=str) == optim_before
    assert torch.equal(torch.get_rng_state(), rng[0]) and random.getstate() == rng[1]
    numpy_after: Any = np.random.get_state()
    assert np.array_equal(numpy_after[1], rng[2])
    assert not (tmp_path / "config.json").exists()
    # a raw loop stepping with the same lrs sees the same losses
    torch.manual_seed(0)
    raw = Normed()
    raw.load_state_dict(before)
    raw_optim = torch.optim.Adam(raw.parameters(), lr=1e-3)
    batches = (batch for _ in range(99) for batch in torch_loader(400))
    for lr, loss in zip(found.lrs, found.losses, strict=True):
        x, y = next(batches)
        raw_optim.zero_grad()
        value = F.mse_loss(raw(x), y)
        value.backward()  # type: ignore[no-untyped-call]  # torch\'s, untyped
        for group in raw_optim.param_groups:
            group["lr"] = lr
        raw_optim.step()
        assert float(value.detach()) == pytest.approx(loss, rel=1e-6)
    assert found.lrs[0] == pytest.approx(1e-5) and len(found.losses) <= 60
    assert found.suggestion is not None and 1e-5 <= found.suggestion <= 1.0
    figure = found.plot(tmp_path / "lr.png")
    assert (tmp_path / "lr.png").stat().st_size > 0 and figure.axes[0].get_xscale() == "log"


def test_lr_find_stops_when_the_loss_diverges(tmp_path: Path) -> None:
    """Up to lr 1e3 the loss blows up: the test stops early and says so."""
    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    found = lr_find(quiet(tmp_path, loader(400, 4)), learner, max_lr=1e3, num_steps=100)
    assert len(found.losses) < 100
    assert found.stop_reason is not None and found.stop_reason.startswith("lr_find: the loss")
