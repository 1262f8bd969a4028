"""Schedules of schedules: ComposedLr reduces its children, SequentialLr chains them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.optim import lr_scheduler as tl

from ember.train import (
    ComposedLr,
    ConstantLr,
    ExponentialLr,
    LinearLr,
    NoamLr,
    SequentialLr,
    StepLr,
    TorchLrScheduler,
)
from ember.train._lr_scheduler.torch_adapter import interval_notice
from tests.train.lr_scheduler.helpers import first_lrs, torch_sequence


@pytest.mark.parametrize(
    ("reduction", "expected"),
    [("prod", [0.5, 0.25, 0.125]), ("sum", [1.5, 1.0, 0.75]), ("avg", [0.75, 0.5, 0.375])],
)
def test_composed_steps_all_children_and_reduces(reduction: Any, expected: list[float]) -> None:
    """ComposedLr steps every child on every call and combines by prod, sum or avg."""
    composed = ComposedLr([ConstantLr(0.5), StepLr(1.0, 1, gamma=0.5)], reduction=reduction)
    assert first_lrs(composed, 3) == expected


def test_composed_default_is_product_and_accepts_floats() -> None:
    """ComposedLr defaults to the product; a float child is a constant factor."""
    assert first_lrs(ComposedLr([ExponentialLr(1.0, 0.5), 0.1]), 3) == pytest.approx(
        [0.1, 0.05, 0.025]
    )


def test_sequential_switches_at_milestones() -> None:
    """SequentialLr: the next child starts at its own step 1 right after each milestone."""
    warmup = LinearLr(0.1, 1.0, 2)  # 0.1, 0.55, 1.0, …
    sequential = SequentialLr([warmup, ExponentialLr(1.0, 0.5), StepLr(0.3, 1, 0.5)], [3, 5])
    lrs = first_lrs(sequential, 8)
    assert lrs == pytest.approx([0.1, 0.55, 1.0, 1.0, 0.5, 0.3, 0.15, 0.075], rel=1e-12)


def test_sequential_steps_only_the_active_child() -> None:
    """SequentialLr leaves inactive children untouched."""
    first, second = ExponentialLr(1.0, 0.5), ExponentialLr(1.0, 0.5)
    sequential = SequentialLr([first, second], milestones=[2])
    first_lrs(sequential, 2)
    assert first.state_dict()["step"] == 2
    assert second.state_dict()["step"] == 0
    first_lrs(sequential, 3)
    assert first.state_dict()["step"] == 2
    assert second.state_dict()["step"] == 3


def test_sequential_with_a_single_child_is_that_child() -> None:
    """SequentialLr with one child and no milestones follows that child."""
    assert first_lrs(SequentialLr([StepLr(1.0, 1, 0.5)], []), 3) == [1.0, 0.5, 0.25]


def test_sequential_matches_torch_sequential_lr() -> None:
    """SequentialLr(warm-up, exponential) follows torch SequentialLR with the same milestone."""
    ours = first_lrs(SequentialLr([LinearLr(0.01, 0.1, 4), ExponentialLr(0.1, 0.9)], [5]), 20)

    def build(o: torch.optim.Optimizer) -> tl.LRScheduler:
        return tl.SequentialLR(o, [tl.LinearLR(o, 0.1, 1.0, 4), tl.ExponentialLR(o, 0.9)], [5])

    assert ours == pytest.approx(torch_sequence(build, 0.1, 20), rel=1e-12)


def test_a_child_cannot_appear_twice() -> None:
    """The same scheduler object twice in a composite is rejected (it would step twice per call)."""
    child = ExponentialLr(0.1, 0.5)
    with pytest.raises(ValueError, match=r"schedulers\[1\] is the same object as schedulers\[0\]"):
        ComposedLr([child, child])


def test_failed_composite_load_leaves_children_unchanged() -> None:
    """A composite whose load fails on one child leaves every child as it was."""
    first, second = StepLr(1.0, 1, 0.5), ExponentialLr(1.0, 0.5)
    composed = ComposedLr([first, second])
    first_lrs(composed, 2)
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


class _PerEpoch:
    """A user's scheduler that advances at each epoch's end (an ``EpochLrScheduler``)."""

    monitor = None

    def step(self) -> float:
        return 0.1

    def end_epoch(self, value: float | None) -> None:
        """Would advance here, but a composition never calls it."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore."""


@pytest.mark.parametrize("owner", ["ComposedLr", "SequentialLr"])
@pytest.mark.parametrize("child", ["StepLR per epoch", "ReduceLROnPlateau", "user's"])
def test_a_child_that_advances_per_epoch_is_refused_naming_the_fix(owner: str, child: str) -> None:
    """A composition steps its children per optimizer step and never ends their epochs: a
    per-epoch child would keep its first lr for the whole run, so it is refused at once."""
    optim = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    per_epoch: Any
    if child == "StepLR per epoch":
        per_epoch = TorchLrScheduler(tl.StepLR(optim, step_size=1), interval="epoch")
    elif child == "ReduceLROnPlateau":
        per_epoch = TorchLrScheduler(tl.ReduceLROnPlateau(optim), monitor="Loss")
    else:
        per_epoch = _PerEpoch()
    with pytest.raises(
        ValueError, match=r"schedulers\[1\] \(.+\) advances once per epoch"
    ) as raised:
        _compose(owner, [ConstantLr(1.0), per_epoch])
    assert f"{owner} steps its children once per optimizer step" in str(raised.value)
    assert "hand a per-epoch scheduler to the Learner on its own" in str(raised.value)


def _compose(owner: str, children: list[Any]) -> ComposedLr | SequentialLr:
    if owner == "ComposedLr":
        return ComposedLr(children)
    return SequentialLr(children, milestones=[3])


def test_a_torch_scheduler_stepped_per_step_is_a_child_like_any_other() -> None:
    optim = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    bare = tl.StepLR(optim, step_size=1, gamma=0.5)
    wrapped = TorchLrScheduler(tl.StepLR(optim, step_size=1, gamma=0.5), interval="step")
    assert len(ComposedLr([bare, wrapped]).schedulers) == 2


def test_a_bare_torch_scheduler_in_a_composition_is_named_at_launch() -> None:
    """The launch's interval notice finds a bare torch scheduler inside a composition (at any
    depth), names the composition and the way to step it per epoch; a chosen one is silent."""
    optim = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    nested = SequentialLr([ConstantLr(0.1), ComposedLr([tl.StepLR(optim, 1)])], milestones=[5])
    notice = interval_notice(nested)
    assert notice is not None
    assert notice.startswith("the torch scheduler StepLR in the ComposedLr is stepped after every")
    assert (
        'hand it to the Learner on its own as TorchLrScheduler(scheduler, interval="epoch")'
        in notice
    )
    chosen = TorchLrScheduler(tl.StepLR(optim, 1), interval="step")
    assert interval_notice(ComposedLr([ConstantLr(0.1), chosen])) is None
