"""What a scheduler is: as_scheduler, the protocol, and the state every kind resumes from."""

from __future__ import annotations

import functools
import json
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
from tests.train.lr_scheduler.helpers import (
    TORCH_SCHEDULERS,
    Factory,
    Harness,
    first_lrs,
    no_optimizer,
    run_steps,
    sgd,
    torch_harness,
)


@pytest.mark.parametrize("value", [0.01, 1, np.float32(0.5), np.int64(2)])
def test_as_scheduler_makes_numbers_constant(value: Any) -> None:
    """A real number (not bool) becomes a ConstantLr with that float."""
    scheduler = as_scheduler(value)
    assert isinstance(scheduler, ConstantLr)
    assert first_lrs(scheduler, 3) == [float(value)] * 3
    assert type(scheduler.step()) is float


def test_as_scheduler_wraps_torch_schedulers() -> None:
    """A torch LRScheduler is wrapped in a TorchLrScheduler."""
    torch_scheduler = tl.StepLR(sgd(), 1)
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
        (sgd(), r"got an optimizer \(SGD\)"),
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
        TorchLrScheduler(tl.StepLR(sgd(), 1)),
    ]
    assert all(isinstance(scheduler, LrScheduler) for scheduler in shipped)


def test_state_dicts_are_tagged_counters() -> None:
    """state_dict holds the kind and the counters, nested for composites."""
    linear = LinearLr(0.1, 0.0, 5)
    first_lrs(linear, 3)
    assert linear.state_dict() == {"kind": "linear", "step": 3}
    assert ConstantLr(0.1).state_dict() == {"kind": "constant"}
    sequential = SequentialLr([StepLr(0.1, 1), NoamLr(1.0)], [1])
    first_lrs(sequential, 2)
    assert sequential.state_dict() == {
        "kind": "sequential",
        "step": 2,
        "schedulers": [{"kind": "step", "step": 1}, {"kind": "noam", "step": 1}],
    }
    composed = ComposedLr([CosineAnnealingLr(0.1, 3), 0.5])
    first_lrs(composed, 1)
    assert composed.state_dict() == {
        "kind": "composed",
        "schedulers": [{"kind": "cosine", "step": 1}, {"kind": "constant"}],
    }


def _plain(build: Callable[..., LrScheduler], *args: Any) -> Harness:
    return build(*args), no_optimizer


def _torch_only(name: str) -> Harness:
    return torch_harness(name)[0]


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
    unbroken = run_steps(factory(), k + m)

    interrupted = factory()
    run_steps(interrupted, k)
    text = json.dumps(interrupted[0].state_dict(), allow_nan=False)
    state = json.loads(text)
    assert state == interrupted[0].state_dict()

    fresh = factory()
    fresh[0].load_state_dict(state)
    assert run_steps(fresh, m) == unbroken[k:]
    assert run_steps(interrupted, m) == unbroken[k:]
