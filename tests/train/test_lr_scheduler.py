"""LR schedulers: Burn's step semantics, torch parity, resumable state, the torch adapter."""

from __future__ import annotations

import collections
import functools
import json
import math
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.optim import lr_scheduler as tl

from ember.train import (
    ComposedLr,
    ConstantLr,
    CosineAnnealingLr,
    ExponentialLr,
    LinearLr,
    LrScheduler,
    NoamLr,
    SequentialLr,
    StepLr,
    TorchLrScheduler,
)
from ember.train._lr_scheduler.base import as_scheduler

# A scheduler plus what the Learner does with each lr it hands out (write it into the optimizer's
# param groups, then step the optimizer); for ember's own schedulers there is no optimizer.
AfterStep = Callable[[float], None]
Harness = tuple[LrScheduler, AfterStep]
Factory = Callable[[], Harness]


def _nothing(lr: float) -> None:
    del lr


def _steps(harness: Harness, n: int) -> list[float]:
    scheduler, after_step = harness
    out = []
    for _ in range(n):
        lr = scheduler.step()
        after_step(lr)
        out.append(lr)
    return out


def _lrs(scheduler: LrScheduler, n: int) -> list[float]:
    return _steps((scheduler, _nothing), n)


def _sgd(lr: float = 0.1, groups: int = 1) -> torch.optim.SGD:
    params = [{"params": [torch.nn.Parameter(torch.zeros(2))]} for _ in range(groups)]
    return torch.optim.SGD(params, lr=lr)


def _learner_like(optimizer: torch.optim.Optimizer) -> AfterStep:
    """What ember's Learner does with an lr: write it into every group, then step the optimizer."""

    def after_step(lr: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()

    return after_step


def _torch_sequence(
    build: Callable[[torch.optim.Optimizer], Any], lr: float, n: int
) -> list[float]:
    """The lrs of the canonical torch loop: ``optimizer.step(); scheduler.step()``."""
    optimizer = _sgd(lr)
    scheduler = build(optimizer)
    out = []
    for _ in range(n):
        out.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return out


# --- hand-computed first steps ------------------------------------------------------------------


def test_constant_returns_lr_every_step() -> None:
    """ConstantLr returns its lr at every step."""
    assert _lrs(ConstantLr(0.25), 4) == [0.25] * 4


def test_linear_first_steps() -> None:
    """LinearLr: step 1 is exactly initial_lr, step num_iters+1 and after exactly final_lr."""
    lrs = _lrs(LinearLr(0.5, 0.1, 4), 7)
    assert lrs[0] == 0.5
    assert lrs[1:4] == pytest.approx([0.4, 0.3, 0.2], rel=1e-12)
    assert lrs[4:] == [0.1, 0.1, 0.1]


def test_linear_warms_up_when_final_is_larger() -> None:
    """LinearLr also goes upwards (a linear warm-up)."""
    assert _lrs(LinearLr(0.25, 1.0, 3), 5) == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_cosine_first_steps() -> None:
    """CosineAnnealingLr uses t = step - 1 and goes back up after num_iters (no restart)."""
    lrs = _lrs(CosineAnnealingLr(1.0, 4), 7)
    c = math.cos(math.pi / 4)
    expected = [1.0, (1 + c) / 2, 0.5, (1 - c) / 2, 0.0, (1 - c) / 2, 0.5]
    assert lrs == pytest.approx(expected, abs=1e-15)


def test_cosine_respects_min_lr() -> None:
    """CosineAnnealingLr goes from initial_lr down to min_lr at step num_iters + 1."""
    lrs = _lrs(CosineAnnealingLr(0.5, 2, min_lr=0.1), 3)
    assert lrs == pytest.approx([0.5, 0.3, 0.1], abs=1e-15)


def test_exponential_first_steps() -> None:
    """ExponentialLr is initial_lr * gamma ** (step - 1)."""
    assert _lrs(ExponentialLr(0.8, 0.5), 4) == [0.8, 0.4, 0.2, 0.1]


def test_step_first_steps() -> None:
    """StepLr is initial_lr * gamma ** ((step - 1) // step_size)."""
    assert _lrs(StepLr(1.0, 2, gamma=0.5), 6) == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_step_default_gamma_is_a_tenth() -> None:
    """StepLr's gamma defaults to 0.1."""
    assert _lrs(StepLr(1.0, 1), 3) == pytest.approx([1.0, 0.1, 0.01], rel=1e-15)


def test_noam_first_steps() -> None:
    """NoamLr is factor * model_size**-0.5 * min(step**-0.5, step * warmup**-1.5)."""
    lrs = _lrs(NoamLr(2.0, warmup_steps=4, model_size=16), 5)
    # 2 * 16**-0.5 = 0.5; warm-up 0.5 * k / 8 up to step 4, then 0.5 / sqrt(k)
    assert lrs == pytest.approx([0.0625, 0.125, 0.1875, 0.25, 0.5 / math.sqrt(5)], rel=1e-15)


def test_noam_defaults() -> None:
    """NoamLr defaults to warmup_steps=4000 and model_size=512."""
    assert NoamLr(1.0).step() == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-15)


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [("prod", [0.5, 0.25, 0.125]), ("sum", [1.5, 1.0, 0.75]), ("avg", [0.75, 0.5, 0.375])],
)
def test_composed_steps_all_children_and_reduces(reduction: Any, expected: list[float]) -> None:
    """ComposedLr steps every child on every call and combines by prod, sum or avg."""
    composed = ComposedLr([ConstantLr(0.5), StepLr(1.0, 1, gamma=0.5)], reduction=reduction)
    assert _lrs(composed, 3) == expected


def test_composed_default_is_product_and_accepts_floats() -> None:
    """ComposedLr defaults to the product; a float child is a constant factor."""
    assert _lrs(ComposedLr([ExponentialLr(1.0, 0.5), 0.1]), 3) == pytest.approx([0.1, 0.05, 0.025])


def test_sequential_switches_at_milestones() -> None:
    """SequentialLr: the next child starts at its own step 1 right after each milestone."""
    warmup = LinearLr(0.1, 1.0, 2)  # 0.1, 0.55, 1.0, …
    sequential = SequentialLr([warmup, ExponentialLr(1.0, 0.5), StepLr(0.3, 1, 0.5)], [3, 5])
    lrs = _lrs(sequential, 8)
    assert lrs == pytest.approx([0.1, 0.55, 1.0, 1.0, 0.5, 0.3, 0.15, 0.075], rel=1e-12)


def test_sequential_steps_only_the_active_child() -> None:
    """SequentialLr leaves inactive children untouched."""
    first, second = ExponentialLr(1.0, 0.5), ExponentialLr(1.0, 0.5)
    sequential = SequentialLr([first, second], milestones=[2])
    _lrs(sequential, 2)
    assert first.state_dict()["step"] == 2
    assert second.state_dict()["step"] == 0
    _lrs(sequential, 3)
    assert first.state_dict()["step"] == 2
    assert second.state_dict()["step"] == 3


def test_sequential_with_a_single_child_is_that_child() -> None:
    """SequentialLr with one child and no milestones follows that child."""
    assert _lrs(SequentialLr([StepLr(1.0, 1, 0.5)], []), 3) == [1.0, 0.5, 0.25]


def test_initial_lr_above_one_is_accepted() -> None:
    """Unlike Burn, an initial lr above 1 is accepted."""
    assert LinearLr(5.0, 0.0, 2).step() == 5.0
    assert CosineAnnealingLr(3.0, 10).step() == 3.0
    assert ExponentialLr(2.0, 0.5).step() == 2.0


# --- parity with torch's schedulers -------------------------------------------------------------

N = 40


def test_linear_matches_torch_linear_lr_decay() -> None:
    """LinearLr(a, b, n) with b < a follows torch LinearLR(lr=a, 1, b/a, n)."""
    ours = _lrs(LinearLr(0.3, 0.05, 7), N)
    theirs = _torch_sequence(lambda o: tl.LinearLR(o, 1.0, 0.05 / 0.3, 7), 0.3, N)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)


def test_linear_matches_torch_linear_lr_warmup() -> None:
    """LinearLr(a, b, n) with a < b follows torch LinearLR(lr=b, a/b, 1, n)."""
    ours = _lrs(LinearLr(0.01, 0.2, 5), N)
    theirs = _torch_sequence(lambda o: tl.LinearLR(o, 0.01 / 0.2, 1.0, 5), 0.2, N)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("min_lr", [0.0, 0.02])
def test_cosine_matches_torch_cosine_annealing(min_lr: float) -> None:
    """CosineAnnealingLr follows torch CosineAnnealingLR, also past num_iters."""
    ours = _lrs(CosineAnnealingLr(0.1, 9, min_lr=min_lr), N)
    theirs = _torch_sequence(lambda o: tl.CosineAnnealingLR(o, T_max=9, eta_min=min_lr), 0.1, N)
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-15)


def test_exponential_matches_torch_exponential_lr() -> None:
    """ExponentialLr follows torch ExponentialLR."""
    ours = _lrs(ExponentialLr(0.1, 0.9), N)
    theirs = _torch_sequence(lambda o: tl.ExponentialLR(o, gamma=0.9), 0.1, N)
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_step_matches_torch_step_lr() -> None:
    """StepLr follows torch StepLR."""
    ours = _lrs(StepLr(0.1, 3, gamma=0.7), N)
    theirs = _torch_sequence(lambda o: tl.StepLR(o, step_size=3, gamma=0.7), 0.1, N)
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_sequential_matches_torch_sequential_lr() -> None:
    """SequentialLr(warm-up, exponential) follows torch SequentialLR with the same milestone."""
    ours = _lrs(SequentialLr([LinearLr(0.01, 0.1, 4), ExponentialLr(0.1, 0.9)], [5]), 20)

    def build(o: torch.optim.Optimizer) -> tl.LRScheduler:
        return tl.SequentialLR(o, [tl.LinearLR(o, 0.1, 1.0, 4), tl.ExponentialLR(o, 0.9)], [5])

    assert ours == pytest.approx(_torch_sequence(build, 0.1, 20), rel=1e-12)


# --- the torch adapter --------------------------------------------------------------------------

TORCH_SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], tl.LRScheduler]] = {
    "StepLR": lambda o: tl.StepLR(o, 3, 0.5),
    "MultiStepLR": lambda o: tl.MultiStepLR(o, [2, 5], 0.5),
    "ExponentialLR": lambda o: tl.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda o: tl.CosineAnnealingLR(o, 5, 0.01),
    "LinearLR": lambda o: tl.LinearLR(o, 0.1, 1.0, 4),
    "LambdaLR": lambda o: tl.LambdaLR(o, lambda e: 1 / (e + 1)),
    "MultiplicativeLR": lambda o: tl.MultiplicativeLR(o, lambda e: 0.95),
    "OneCycleLR": lambda o: tl.OneCycleLR(o, 1.0, total_steps=200),
    "CyclicLR": lambda o: tl.CyclicLR(o, 0.01, 0.1, step_size_up=3),
    "PolynomialLR": lambda o: tl.PolynomialLR(o, 5, 2.0),
    "CosineAnnealingWarmRestarts": lambda o: tl.CosineAnnealingWarmRestarts(o, 3, 2),
    "SequentialLR": lambda o: tl.SequentialLR(
        o, [tl.LinearLR(o, 0.1, 1.0, 3), tl.CosineAnnealingLR(o, 6)], [3]
    ),
    "ChainedScheduler": lambda o: tl.ChainedScheduler(
        [tl.ConstantLR(o, 0.5, 3), tl.ExponentialLR(o, 0.9)]
    ),
}


def _torch_harness(name: str, groups: int = 1) -> tuple[Harness, torch.optim.Optimizer]:
    optimizer = torch.optim.SGD(
        [{"params": [torch.nn.Parameter(torch.zeros(2))]} for _ in range(groups)],
        lr=0.1,
        momentum=0.9,  # CyclicLR and OneCycleLR cycle the momentum
    )
    adapter = TorchLrScheduler(TORCH_SCHEDULERS[name](optimizer))
    return (adapter, _learner_like(optimizer)), optimizer


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
    optimizer = _sgd(0.1)
    scheduler = tl.StepLR(optimizer, 1, gamma=0.5)
    adapter = TorchLrScheduler(scheduler)
    assert adapter.step() == 0.1
    assert scheduler.last_epoch == 0
    optimizer.step()
    assert adapter.step() == 0.05
    assert scheduler.last_epoch == 1


def test_adapter_warns_like_torch_when_the_optimizer_never_stepped() -> None:
    """Advancing before any optimizer step is still reported by torch, as in a plain loop."""
    adapter = TorchLrScheduler(tl.StepLR(_sgd(0.1), 1))
    adapter.step()
    with pytest.warns(UserWarning, match=r"before `optimizer\.step\(\)`"):
        adapter.step()


def test_adapter_step_all_returns_every_group() -> None:
    """step_all returns each param group's lr; step returns group 0's."""
    optimizer = _sgd(0.1, groups=2)
    optimizer.param_groups[1]["lr"] = 1.0
    adapter = TorchLrScheduler(tl.ExponentialLR(optimizer, 0.5))
    after_step = _learner_like(optimizer)  # writes group 0's lr into both groups
    assert adapter.step_all() == [0.1, 1.0]
    after_step(0.1)
    # Group 1's lr was overwritten with 0.1, yet ExponentialLR goes on from its own last value.
    assert adapter.step_all() == [0.05, 0.5]
    after_step(0.05)
    assert adapter.step() == 0.025


def test_adapter_inside_composed_is_not_bent_by_the_combined_lr() -> None:
    """A chainable torch child of ComposedLr keeps its sequence though groups get the product."""
    optimizer = _sgd(1.0)
    composed = ComposedLr([TorchLrScheduler(tl.ExponentialLR(optimizer, 0.5)), 0.1])
    lrs = _steps((composed, _learner_like(optimizer)), 4)
    assert lrs == pytest.approx([0.1, 0.05, 0.025, 0.0125], rel=1e-15)


@pytest.mark.parametrize("name", sorted(TORCH_SCHEDULERS))
def test_adapter_resumes_after_one_step_into_a_fresh_optimizer(name: str) -> None:
    """Resuming after step 1 into a fresh optimizer continues exactly and without a warning."""
    harness, _ = _torch_harness(name)
    reference = _steps(harness, 12)

    first, _ = _torch_harness(name)
    _steps(first, 1)
    state = json.loads(json.dumps(first[0].state_dict()))
    resumed, _ = _torch_harness(name)
    resumed[0].load_state_dict(state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _steps(resumed, 11) == reference[1:]


def test_adapter_stores_tensor_lrs_exactly() -> None:
    """Tensor lrs in a torch state go through JSON with their dtype and value."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=torch.tensor(0.1))
    adapter = TorchLrScheduler(tl.StepLR(optimizer, 1, 0.5))
    after_step = _learner_like(optimizer)
    _steps((adapter, after_step), 3)
    state = json.loads(json.dumps(adapter.state_dict()))
    stored = {"__tensor__": {"dtype": "float32", "data": float(torch.tensor(0.1))}}
    assert state["scheduler"]["base_lrs"] == [stored]

    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=torch.tensor(0.1))
    restored = TorchLrScheduler(tl.StepLR(other, 1, 0.5))
    restored.load_state_dict(state)
    assert isinstance(restored.scheduler.base_lrs[0], torch.Tensor)
    assert _steps((restored, _learner_like(other)), 3) == _steps((adapter, after_step), 3)


def test_adapter_restores_multistep_milestones_as_a_counter() -> None:
    """MultiStepLR's Counter of milestones (int keys) survives JSON as a Counter."""
    state = json.loads(json.dumps(TorchLrScheduler(tl.MultiStepLR(_sgd(), [2, 2, 5])).state_dict()))
    assert state["scheduler"]["milestones"] == {"__counter__": [[2, 2], [5, 1]]}
    restored = TorchLrScheduler(tl.MultiStepLR(_sgd(), [9]))
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
    optimizer = _sgd(0.1)
    adapter = TorchLrScheduler(tl.LambdaLR(optimizer, _Schedule({"decay": [1, 2]})))
    state = json.loads(json.dumps(adapter.state_dict()))
    assert state["scheduler"]["lr_lambdas"] == [{"table": {"decay": [1, 2]}}]
    fresh = _Schedule(None)
    TorchLrScheduler(tl.LambdaLR(_sgd(0.1), fresh)).load_state_dict(state)
    assert fresh.table == {"decay": [1, 2]}


def test_adapter_state_that_is_not_json_names_the_value() -> None:
    """state_dict raises TypeError naming where a non-JSON value sits in the torch state."""
    adapter = TorchLrScheduler(tl.LambdaLR(_sgd(0.1), _Schedule({1.5j})))
    with pytest.raises(TypeError, match=r"scheduler\.lr_lambdas\[0\]\.table is a set"):
        adapter.state_dict()


def test_adapter_rejects_another_torch_class() -> None:
    """Loading the state of another torch scheduler class raises ValueError naming both."""
    state = TorchLrScheduler(tl.StepLR(_sgd(), 2)).state_dict()
    adapter = TorchLrScheduler(tl.ExponentialLR(_sgd(), 0.9))
    with pytest.raises(ValueError, match=r"'StepLR'.*'ExponentialLR'"):
        adapter.load_state_dict(state)


def test_adapter_rejects_a_state_for_another_number_of_groups() -> None:
    """A torch state for another number of param groups raises and leaves the scheduler as is."""
    state = TorchLrScheduler(tl.StepLR(_sgd(0.1, groups=2), 1, 0.5)).state_dict()
    optimizer = _sgd(0.2)
    adapter = TorchLrScheduler(tl.StepLR(optimizer, 1, 0.5))
    with pytest.raises(ValueError, match="2 lrs but the optimizer has 1 param groups"):
        adapter.load_state_dict(state)
    assert adapter.step() == 0.2


def test_adapter_rejects_reduce_on_plateau_and_non_schedulers() -> None:
    """ReduceLROnPlateau (needs a metric) and non-schedulers are a TypeError."""
    with pytest.raises(TypeError, match="ReduceLROnPlateau"):
        TorchLrScheduler(tl.ReduceLROnPlateau(_sgd()))
    with pytest.raises(TypeError, match="got float"):
        TorchLrScheduler(0.1)  # type: ignore[arg-type]  # the wrong type is the point


def test_adapter_repr_names_the_torch_class() -> None:
    """The adapter's repr names the torch scheduler, its last lr and the step."""
    assert repr(TorchLrScheduler(tl.StepLR(_sgd(0.5), 1))) == (
        "TorchLrScheduler(StepLR, last_lr=[0.5], step=0)"
    )


# --- as_scheduler -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0.01, 1, np.float32(0.5), np.int64(2)])
def test_as_scheduler_makes_numbers_constant(value: Any) -> None:
    """A real number (not bool) becomes a ConstantLr with that float."""
    scheduler = as_scheduler(value)
    assert isinstance(scheduler, ConstantLr)
    assert _lrs(scheduler, 3) == [float(value)] * 3
    assert type(scheduler.step()) is float


def test_as_scheduler_wraps_torch_schedulers() -> None:
    """A torch LRScheduler is wrapped in a TorchLrScheduler."""
    torch_scheduler = tl.StepLR(_sgd(), 1)
    scheduler = as_scheduler(torch_scheduler)
    assert isinstance(scheduler, TorchLrScheduler)
    assert scheduler.scheduler is torch_scheduler


class _Custom:
    def step(self) -> float:
        return 0.3

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


@pytest.mark.parametrize("scheduler", [LinearLr(0.1, 0.0, 3), _Custom()])
def test_as_scheduler_returns_schedulers_as_is(scheduler: LrScheduler) -> None:
    """An LrScheduler (shipped or user-written) is returned unchanged."""
    assert as_scheduler(scheduler) is scheduler


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (True, "bool"),
        ("0.1", "cannot use a str"),
        (None, "cannot use a NoneType"),
        (torch.tensor(0.1), "cannot use a Tensor"),
        (_sgd(), r"got an optimizer \(SGD\)"),
    ],
)
def test_as_scheduler_rejects_other_types(value: Any, match: str) -> None:
    """Anything else is a TypeError naming the type and listing what is accepted."""
    with pytest.raises(TypeError, match=match) as info:
        as_scheduler(value)
    assert "LrScheduler" in str(info.value)
    assert "float" in str(info.value)
    assert "torch.optim.lr_scheduler.LRScheduler" in str(info.value)


def test_shipped_schedulers_satisfy_the_protocol() -> None:
    """Every shipped scheduler is an LrScheduler."""
    shipped = [
        ConstantLr(0.1),
        LinearLr(0.1, 0.0, 2),
        CosineAnnealingLr(0.1, 2),
        ExponentialLr(0.1, 0.5),
        StepLr(0.1, 2),
        NoamLr(1.0),
        ComposedLr([0.1]),
        SequentialLr([0.1], []),
        TorchLrScheduler(tl.StepLR(_sgd(), 1)),
    ]
    assert all(isinstance(scheduler, LrScheduler) for scheduler in shipped)


# --- validation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ConstantLr(-0.1), "lr must be >= 0, got -0.1"),
        (lambda: LinearLr(0, 0.1, 10), "initial_lr must be > 0, got 0"),
        (lambda: LinearLr(0.1, -0.1, 10), "final_lr must be >= 0, got -0.1"),
        (lambda: LinearLr(0.1, 0.0, 0), "num_iters must be >= 1, got 0"),
        (lambda: LinearLr(math.nan, 0.0, 3), "initial_lr must be finite, got nan"),
        (lambda: LinearLr(math.inf, 0.0, 3), "initial_lr must be finite, got inf"),
        (lambda: CosineAnnealingLr(-1.0, 10), "initial_lr must be > 0, got -1.0"),
        (lambda: CosineAnnealingLr(0.1, 0), "num_iters must be >= 1, got 0"),
        (lambda: CosineAnnealingLr(0.1, 10, min_lr=-0.1), "min_lr must be >= 0, got -0.1"),
        (lambda: CosineAnnealingLr(0.1, 10, min_lr=0.2), r"min_lr must be <= initial_lr.*0\.2"),
        (lambda: ExponentialLr(0.0, 0.5), "initial_lr must be > 0, got 0.0"),
        (lambda: ExponentialLr(0.1, 0.0), "gamma must be > 0, got 0.0"),
        (lambda: ExponentialLr(0.1, 1.5), "gamma must be <= 1, got 1.5"),
        (lambda: StepLr(0.1, 0), "step_size must be >= 1, got 0"),
        (lambda: StepLr(0.1, 2, gamma=-0.5), "gamma must be > 0, got -0.5"),
        (lambda: StepLr(-0.1, 2), "initial_lr must be > 0, got -0.1"),
        (lambda: NoamLr(0.0), "factor must be > 0, got 0.0"),
        (lambda: NoamLr(1.0, warmup_steps=0), "warmup_steps must be >= 1, got 0"),
        (lambda: NoamLr(1.0, model_size=0), "model_size must be >= 1, got 0"),
        (lambda: ComposedLr([]), "schedulers must not be empty"),
        (
            lambda: ComposedLr([0.1], reduction="max"),  # type: ignore[arg-type]
            "reduction must be one of .* got 'max'",
        ),
        (lambda: SequentialLr([], []), "schedulers must not be empty"),
        (lambda: SequentialLr([0.1, 0.2], []), "milestones must have .* 1 entries, got 0"),
        (lambda: SequentialLr([0.1, 0.2], [0]), r"milestones\[0\] must be >= 1, got 0"),
        (lambda: SequentialLr([0.1, 0.2, 0.3], [3, 3]), "strictly increasing, got \\[3, 3\\]"),
    ],
)
def test_invalid_arguments_raise_naming_them(build: Callable[[], object], message: str) -> None:
    """Invalid arguments raise ValueError in the constructor, naming the argument and value."""
    with pytest.raises(ValueError, match=message):
        build()


@pytest.mark.parametrize(
    ("build", "message"),
    [
        # each call is ill-typed on purpose: the runtime check is what is under test
        (
            lambda: LinearLr(0.1, 0.0, 2.5),  # type: ignore[arg-type]
            r"num_iters must be an int, got 2.5 \(float\)",
        ),
        (lambda: StepLr(0.1, True), r"step_size must be an int, got True \(bool\)"),
        (
            lambda: ExponentialLr("0.1", 0.5),  # type: ignore[arg-type]
            r"initial_lr must be a real number, got '0.1' \(str\)",
        ),
        (
            lambda: ComposedLr(ConstantLr(0.1)),  # type: ignore[arg-type]
            "schedulers must be a list",
        ),
        (lambda: ComposedLr(["0.1"]), "cannot use a str"),  # type: ignore[list-item]
    ],
)
def test_wrong_argument_types_raise_type_error(build: Callable[[], object], message: str) -> None:
    """Arguments of the wrong type raise TypeError naming the argument."""
    with pytest.raises(TypeError, match=message):
        build()


def test_a_child_cannot_appear_twice() -> None:
    """The same scheduler object twice in a composite is rejected (it would step twice per call)."""
    child = ExponentialLr(0.1, 0.5)
    with pytest.raises(ValueError, match=r"schedulers\[1\] is the same object as schedulers\[0\]"):
        ComposedLr([child, child])


# --- state dicts --------------------------------------------------------------------------------


def test_state_dicts_are_tagged_counters() -> None:
    """state_dict holds the kind and the counters, nested for composites."""
    linear = LinearLr(0.1, 0.0, 5)
    _lrs(linear, 3)
    assert linear.state_dict() == {"kind": "linear", "step": 3}
    assert ConstantLr(0.1).state_dict() == {"kind": "constant"}
    sequential = SequentialLr([StepLr(0.1, 1), NoamLr(1.0)], [1])
    _lrs(sequential, 2)
    assert sequential.state_dict() == {
        "kind": "sequential",
        "step": 2,
        "schedulers": [{"kind": "step", "step": 1}, {"kind": "noam", "step": 1}],
    }
    composed = ComposedLr([CosineAnnealingLr(0.1, 3), 0.5])
    _lrs(composed, 1)
    assert composed.state_dict() == {
        "kind": "composed",
        "schedulers": [{"kind": "cosine", "step": 1}, {"kind": "constant"}],
    }


def test_loading_another_kind_raises_naming_it() -> None:
    """Loading the state of another scheduler kind raises ValueError naming both kinds."""
    with pytest.raises(ValueError, match="'cosine' scheduler into LinearLr"):
        LinearLr(0.1, 0.0, 3).load_state_dict(CosineAnnealingLr(0.1, 3).state_dict())
    with pytest.raises(ValueError, match="'linear' scheduler into ComposedLr"):
        ComposedLr([0.1]).load_state_dict(LinearLr(0.1, 0.0, 3).state_dict())


@pytest.mark.parametrize(
    ("scheduler", "state", "message"),
    [
        (LinearLr(0.1, 0.0, 3), {"kind": "linear"}, "LinearLr state is missing key 'step'"),
        (StepLr(0.1, 3), {"step": 2}, "StepLr state is missing key 'kind'"),
        (NoamLr(1.0), {"kind": "noam", "step": -1}, r"state\['step'\] must be an int >= 0"),
        (NoamLr(1.0), {"kind": "noam", "step": 2.0}, r"state\['step'\] must be an int >= 0"),
        (NoamLr(1.0), {"kind": "noam", "step": 1, "lr": 2}, r"unexpected key\(s\) \['lr'\]"),
        (ComposedLr([0.1]), {"kind": "composed"}, "missing key 'schedulers'"),
        (
            ComposedLr([0.1, 0.2]),
            {"kind": "composed", "schedulers": [{"kind": "constant"}]},
            "list of 2 child states, got 1 states",
        ),
        (
            SequentialLr([0.1], []),
            {"kind": "sequential", "schedulers": [{"kind": "constant"}]},
            "SequentialLr state is missing key 'step'",
        ),
        (
            TorchLrScheduler(tl.StepLR(_sgd(), 1)),
            {"kind": "torch", "class": "StepLR", "step": 1},
            "missing key 'scheduler'",
        ),
    ],
)
def test_loading_a_bad_state_raises_naming_the_key(
    scheduler: LrScheduler, state: dict[str, Any], message: str
) -> None:
    """A state with a missing, unexpected or invalid key raises ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        scheduler.load_state_dict(state)


def test_failed_composite_load_leaves_children_unchanged() -> None:
    """A composite whose load fails on one child leaves every child as it was."""
    first, second = StepLr(1.0, 1, 0.5), ExponentialLr(1.0, 0.5)
    composed = ComposedLr([first, second])
    _lrs(composed, 2)
    bad = {"kind": "composed", "schedulers": [{"kind": "step", "step": 7}, {"kind": "linear"}]}
    with pytest.raises(ValueError, match="'linear' scheduler into ExponentialLr"):
        composed.load_state_dict(bad)
    assert first.state_dict()["step"] == 2
    assert composed.step() == pytest.approx(0.25 * 0.25)


def test_reprs_show_configuration_and_step() -> None:
    """Reprs show the arguments, the step counter and the children."""
    linear = LinearLr(0.1, 0.0, 3)
    linear.step()
    assert repr(linear) == "LinearLr(initial_lr=0.1, final_lr=0.0, num_iters=3, step=1)"
    assert repr(ComposedLr([0.5, NoamLr(2.0)], reduction="sum")) == (
        "ComposedLr([ConstantLr(lr=0.5), NoamLr(factor=2.0, warmup_steps=4000, model_size=512, "
        "step=0)], reduction='sum')"
    )
    assert repr(SequentialLr([0.5, StepLr(0.1, 2)], [4])) == (
        "SequentialLr([ConstantLr(lr=0.5), StepLr(initial_lr=0.1, step_size=2, gamma=0.1, "
        "step=0)], milestones=[4], step=0)"
    )


# --- resume property: every kind ----------------------------------------------------------------


def _plain(build: Callable[..., LrScheduler], *args: Any) -> Harness:
    return build(*args), _nothing


def _torch_only(name: str) -> Harness:
    return _torch_harness(name)[0]


def _composite(
    build: Callable[..., LrScheduler], children: Sequence[Factory], *args: Any
) -> Harness:
    harnesses = [child() for child in children]

    def after_step(lr: float) -> None:
        for _, child_after in harnesses:
            child_after(lr)

    return build([scheduler for scheduler, _ in harnesses], *args), after_step


lrs_ = st.floats(1e-4, 5.0)
iters = st.integers(1, 12)


@st.composite
def _cosine(draw: st.DrawFn) -> Factory:
    initial = draw(lrs_)
    low = draw(st.floats(0.0, 1.0)) * initial
    return functools.partial(_plain, CosineAnnealingLr, initial, draw(iters), low)


leaves: st.SearchStrategy[Factory] = st.one_of(
    st.builds(functools.partial, st.just(_plain), st.just(ConstantLr), lrs_),
    st.builds(
        functools.partial, st.just(_plain), st.just(LinearLr), lrs_, st.floats(0.0, 5.0), iters
    ),
    _cosine(),
    st.builds(functools.partial, st.just(_plain), st.just(ExponentialLr), lrs_, st.floats(0.5, 1)),
    st.builds(
        functools.partial, st.just(_plain), st.just(StepLr), lrs_, iters, st.floats(0.1, 2.0)
    ),
    st.builds(
        functools.partial,
        st.just(_plain),
        st.just(NoamLr),
        st.floats(0.1, 10.0),
        iters,
        st.integers(1, 1024),
    ),
    st.builds(functools.partial, st.just(_torch_only), st.sampled_from(sorted(TORCH_SCHEDULERS))),
)


@st.composite
def _sequential(draw: st.DrawFn, children: st.SearchStrategy[Factory]) -> Factory:
    kids = draw(st.lists(children, min_size=1, max_size=3))
    gaps = draw(st.lists(st.integers(1, 6), min_size=len(kids) - 1, max_size=len(kids) - 1))
    milestones = [sum(gaps[: i + 1]) for i in range(len(gaps))]
    return functools.partial(_composite, SequentialLr, kids, milestones)


def _nested(children: st.SearchStrategy[Factory]) -> st.SearchStrategy[Factory]:
    composed = st.builds(
        functools.partial,
        st.just(_composite),
        st.just(ComposedLr),
        st.lists(children, min_size=1, max_size=3),
        st.sampled_from(["prod", "sum", "avg"]),
    )
    return st.one_of(composed, _sequential(children))


schedulers: st.SearchStrategy[Factory] = st.recursive(leaves, _nested, max_leaves=5)


@settings(max_examples=150, deadline=None)
@given(factory=schedulers, k=st.integers(0, 25), m=st.integers(1, 15))
def test_state_round_trip_resumes_the_same_sequence(factory: Factory, k: int, m: int) -> None:
    """state_dict -> JSON -> a fresh instance at step k gives the next m lrs of an unbroken run."""
    unbroken = _steps(factory(), k + m)

    interrupted = factory()
    _steps(interrupted, k)
    text = json.dumps(interrupted[0].state_dict(), allow_nan=False)
    state = json.loads(text)
    assert state == interrupted[0].state_dict()

    fresh = factory()
    fresh[0].load_state_dict(state)
    assert _steps(fresh, m) == unbroken[k:]
    assert _steps(interrupted, m) == unbroken[k:]
