"""Bad constructor arguments and bad loaded states raise early, naming the argument or key."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
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
from tests.train.lr_scheduler.helpers import sgd


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
            TorchLrScheduler(tl.StepLR(sgd(), 1)),
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
