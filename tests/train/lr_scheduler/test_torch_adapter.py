"""TorchLrScheduler: torch's schedulers inside ember's step semantics, with a JSON state."""

from __future__ import annotations

import collections
import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.optim import lr_scheduler as tl

from ember.train import (
    CliMetricsRenderer,
    ComposedLr,
    Learner,
    LossMetric,
    SupervisedTraining,
    TorchLrScheduler,
    _session,
)
from tests.train.fixtures import TinyRegressor, loader
from tests.train.lr_scheduler.helpers import (
    TORCH_SCHEDULERS,
    learner_like,
    run_steps,
    sgd,
    torch_harness,
)


def _train(
    optimizer: torch.optim.Optimizer, weight: torch.nn.Parameter, before_step: Callable[[], None]
) -> None:
    loss = (weight * torch.arange(1.0, 4.0)).pow(2).sum()
    optimizer.zero_grad()
    torch.autograd.backward(loss)  # typed, unlike Tensor.backward
    before_step()
    optimizer.step()


@pytest.mark.parametrize("name", sorted(TORCH_SCHEDULERS))
def test_adapter_reproduces_the_canonical_torch_loop(name: str) -> None:
    """With the adapter the optimizer uses the lrs of the loop optimizer.step(); sched.step()."""
    torch.manual_seed(0)
    start = torch.randn(3)

    def run(ember_style: bool) -> tuple[list[float], torch.Tensor]:
        weight = torch.nn.Parameter(start.clone())
        optimizer = torch.optim.SGD([weight], lr=0.1, momentum=0.9)
        used: list[float] = []
        # What the optimizer actually used, read when it steps.
        optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"])
        )
        scheduler = TORCH_SCHEDULERS[name](optimizer)
        adapter = TorchLrScheduler(scheduler)
        for _ in range(25):
            if ember_style:
                lr = adapter.step()

                def write(lr: float = lr) -> None:
                    for group in optimizer.param_groups:
                        group["lr"] = lr

                _train(optimizer, weight, write)
            else:
                _train(optimizer, weight, lambda: None)
                scheduler.step()
        return used, weight.detach().clone()

    canonical_lrs, canonical_weight = run(ember_style=False)
    ember_lrs, ember_weight = run(ember_style=True)
    assert ember_lrs == canonical_lrs
    assert len(set(canonical_lrs)) > 1, "the schedule should not be constant over 25 steps"
    assert torch.equal(ember_weight, canonical_weight)


def test_adapter_first_step_is_the_value_after_construction() -> None:
    """The adapter's first lr is get_last_lr() after construction, without advancing torch."""
    optimizer = sgd(0.1)
    scheduler = tl.StepLR(optimizer, 1, gamma=0.5)
    adapter = TorchLrScheduler(scheduler)
    assert adapter.step() == 0.1
    assert scheduler.last_epoch == 0
    optimizer.step()
    assert adapter.step() == 0.05
    assert scheduler.last_epoch == 1


def test_adapter_warns_like_torch_when_the_optimizer_never_stepped() -> None:
    """Advancing before any optimizer step is still reported by torch, as in a plain loop."""
    adapter = TorchLrScheduler(tl.StepLR(sgd(0.1), 1))
    adapter.step()
    with pytest.warns(UserWarning, match=r"before `optimizer\.step\(\)`"):
        adapter.step()


def test_adapter_step_all_returns_every_group() -> None:
    """step_all returns each param group's lr; step returns group 0's."""
    optimizer = sgd(0.1, groups=2)
    optimizer.param_groups[1]["lr"] = 1.0
    adapter = TorchLrScheduler(tl.ExponentialLR(optimizer, 0.5))
    after_step = learner_like(optimizer)  # writes group 0's lr into both groups
    assert adapter.step_all() == [0.1, 1.0]
    after_step(0.1)
    # Group 1's lr was overwritten with 0.1, yet ExponentialLR goes on from its own last value.
    assert adapter.step_all() == [0.05, 0.5]
    after_step(0.05)
    assert adapter.step() == 0.025


def test_adapter_inside_composed_is_not_bent_by_the_combined_lr() -> None:
    """A chainable torch child of ComposedLr keeps its sequence though groups get the product."""
    optimizer = sgd(1.0)
    composed = ComposedLr([TorchLrScheduler(tl.ExponentialLR(optimizer, 0.5)), 0.1])
    lrs = run_steps((composed, learner_like(optimizer)), 4)
    assert lrs == pytest.approx([0.1, 0.05, 0.025, 0.0125], rel=1e-15)


@pytest.mark.parametrize("name", sorted(TORCH_SCHEDULERS))
def test_adapter_resumes_after_one_step_into_a_fresh_optimizer(name: str) -> None:
    """Resuming after step 1 into a fresh optimizer continues exactly and without a warning."""
    harness, _ = torch_harness(name)
    reference = run_steps(harness, 12)

    first, _ = torch_harness(name)
    run_steps(first, 1)
    state = json.loads(json.dumps(first[0].state_dict()))
    resumed, _ = torch_harness(name)
    resumed[0].load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert run_steps(resumed, 11) == reference[1:]


def test_adapter_stores_tensor_lrs_exactly() -> None:
    """Tensor lrs in a torch state go through JSON with their dtype and value."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=torch.tensor(0.1))
    adapter = TorchLrScheduler(tl.StepLR(optimizer, 1, 0.5))
    after_step = learner_like(optimizer)
    run_steps((adapter, after_step), 3)
    state = json.loads(json.dumps(adapter.state_dict()))
    stored = {"__tensor__": {"dtype": "float32", "data": float(torch.tensor(0.1))}}
    assert state["scheduler"]["base_lrs"] == [stored]

    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=torch.tensor(0.1))
    restored = TorchLrScheduler(tl.StepLR(other, 1, 0.5))
    restored.load_state_dict(state)
    assert isinstance(restored.scheduler.base_lrs[0], torch.Tensor)
    assert run_steps((restored, learner_like(other)), 3) == run_steps((adapter, after_step), 3)


def test_adapter_restores_multistep_milestones_as_a_counter() -> None:
    """MultiStepLR's Counter of milestones (int keys) survives JSON as a Counter."""
    state = json.loads(json.dumps(TorchLrScheduler(tl.MultiStepLR(sgd(), [2, 2, 5])).state_dict()))
    assert state["scheduler"]["milestones"] == {"__counter__": [[2, 2], [5, 1]]}
    restored = TorchLrScheduler(tl.MultiStepLR(sgd(), [9]))
    restored.load_state_dict(state)
    assert restored.scheduler.milestones == collections.Counter({2: 2, 5: 1})  # type: ignore[attr-defined]
    assert isinstance(restored.scheduler.milestones, collections.Counter)  # type: ignore[attr-defined]


class _Schedule:
    """A callable lr_lambda object: torch saves its __dict__."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __call__(self, epoch: int) -> float:
        return 0.5**epoch


def test_adapter_saves_a_callable_objects_dict() -> None:
    """A LambdaLR callable object's JSON attributes are saved and restored."""
    optimizer = sgd(0.1)
    adapter = TorchLrScheduler(tl.LambdaLR(optimizer, _Schedule({"decay": [1, 2]})))
    state = json.loads(json.dumps(adapter.state_dict()))
    assert state["scheduler"]["lr_lambdas"] == [{"table": {"decay": [1, 2]}}]
    fresh = _Schedule(None)
    TorchLrScheduler(tl.LambdaLR(sgd(0.1), fresh)).load_state_dict(state)
    assert fresh.table == {"decay": [1, 2]}


def test_adapter_state_that_is_not_json_names_the_value() -> None:
    """state_dict raises TypeError naming where a non-JSON value sits in the torch state."""
    adapter = TorchLrScheduler(tl.LambdaLR(sgd(0.1), _Schedule({1.5j})))
    with pytest.raises(TypeError, match=r"scheduler\.lr_lambdas\[0\]\.table is a set"):
        adapter.state_dict()


def test_adapter_rejects_another_torch_class() -> None:
    """Loading the state of another torch scheduler class raises ValueError naming both."""
    state = TorchLrScheduler(tl.StepLR(sgd(), 2)).state_dict()
    adapter = TorchLrScheduler(tl.ExponentialLR(sgd(), 0.9))
    with pytest.raises(ValueError, match=r"'StepLR'.*'ExponentialLR'"):
        adapter.load_state_dict(state)


def test_adapter_rejects_a_state_for_another_number_of_groups() -> None:
    """A torch state for another number of param groups raises and leaves the scheduler as is."""
    state = TorchLrScheduler(tl.StepLR(sgd(0.1, groups=2), 1, 0.5)).state_dict()
    optimizer = sgd(0.2)
    adapter = TorchLrScheduler(tl.StepLR(optimizer, 1, 0.5))
    with pytest.raises(ValueError, match="2 lrs but the optimizer has 1 param groups"):
        adapter.load_state_dict(state)
    assert adapter.step() == 0.2


def test_adapter_rejects_reduce_on_plateau_and_non_schedulers() -> None:
    """ReduceLROnPlateau (needs a metric) and non-schedulers are a TypeError."""
    with pytest.raises(TypeError, match="ReduceLROnPlateau"):
        TorchLrScheduler(tl.ReduceLROnPlateau(sgd()))
    with pytest.raises(TypeError, match="got float"):
        TorchLrScheduler(0.1)  # type: ignore[arg-type]  # the wrong type is the point


def test_adapter_repr_names_the_torch_class() -> None:
    """The adapter's repr names the torch scheduler, its last lr and the step."""
    assert repr(TorchLrScheduler(tl.StepLR(sgd(0.5), 1))) == (
        "TorchLrScheduler(StepLR, last_lr=[0.5], step=0)"
    )


def test_end_training_takes_the_owed_advance_once_and_survives_a_state_round_trip() -> None:
    """After 3 optimizer steps the torch scheduler has advanced twice (lazily); end_training()
    makes it 3, as a raw loop; a copy loaded from that state does not advance again on its
    next step, and a state with a wrong caught_up is refused."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    adapter = TorchLrScheduler(torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5))
    for _ in range(3):
        adapter.step()
        optimizer.step()
    adapter.end_training()
    adapter.end_training()  # once only
    assert adapter.scheduler.last_epoch == 3 and optimizer.param_groups[0]["lr"] == 0.125
    state = adapter.state_dict()
    assert state["caught_up"] is True
    other_optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    other = TorchLrScheduler(torch.optim.lr_scheduler.StepLR(other_optimizer, 1, gamma=0.5))
    other.load_state_dict(state)
    assert other.step() == adapter.step() == 0.125  # the 4th step's lr, not advanced twice
    with pytest.raises(ValueError, match="caught_up"):
        other.load_state_dict({**state, "caught_up": "yes"})


def quiet_launch(directory: Path, schedule: Callable[[torch.optim.Optimizer], Any]) -> str:
    """Train a tiny model with ``schedule(optimizer)`` handed to the Learner bare; what the
    renderer printed."""
    torch.manual_seed(0)
    model = TinyRegressor()
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    stream = io.StringIO()
    result = (
        SupervisedTraining(directory, loader(8, 4))
        .renderer(CliMetricsRenderer(stream))
        .metrics(LossMetric())
        .launch(Learner(model, optim, schedule(optim)))
    )
    assert result.error is None, result.traceback
    return stream.getvalue()


def test_a_hugging_face_schedule_handed_bare_says_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """transformers' get_cosine_schedule_with_warmup (and its other schedules) are step
    schedules: no interval notice, on the screen or in experiment.log; a LambdaLR of one's own
    still gets it."""
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(_session, "_TOLD", set())
    schedules: list[Callable[[torch.optim.Optimizer], Any]] = [
        lambda optim: transformers.get_cosine_schedule_with_warmup(optim, 2, 10),
        lambda optim: transformers.get_linear_schedule_with_warmup(optim, 2, 10),
        lambda optim: transformers.get_constant_schedule(optim),
        lambda optim: transformers.get_scheduler("cosine", optim, 2, 10),
    ]
    for index, schedule in enumerate(schedules):
        directory = tmp_path / f"hf-{index}"
        shown = quiet_launch(directory, schedule)
        logged = (directory / "experiment.log").read_text(encoding="utf-8")
        assert "stepped after every optimizer step" not in shown + logged
    own = quiet_launch(tmp_path / "own", lambda optim: tl.LambdaLR(optim, lambda step: 0.9**step))
    assert "the torch scheduler LambdaLR handed to the Learner is stepped after every" in own


def test_an_interval_notice_is_shown_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A notebook or a sweep launching the same script again: the notice is on the screen the
    first time; later runs write it to their experiment.log only."""
    monkeypatch.setattr(_session, "_TOLD", set())
    notice = "the torch scheduler StepLR handed to the Learner is stepped after every"
    for run in range(3):
        directory = tmp_path / f"run-{run}"
        shown = quiet_launch(directory, lambda optim: tl.StepLR(optim, step_size=1))
        assert (notice in shown) == (run == 0)
        logged = (directory / "experiment.log").read_text(encoding="utf-8")
        assert notice in logged
        assert ("WARNING" if run == 0 else "INFO") in next(
            line for line in logged.splitlines() if notice in line
        )
