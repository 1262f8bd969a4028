"""The closed-form schedules: Burn's step semantics (hand-computed first steps), torch parity."""

from __future__ import annotations

import math

import pytest
from torch.optim import lr_scheduler as tl

from ember.train import ConstantLr, CosineAnnealingLr, ExponentialLr, LinearLr, NoamLr, StepLr
from tests.train.lr_scheduler.helpers import first_lrs, torch_sequence


def test_constant_returns_lr_every_step() -> None:
    """ConstantLr returns its lr at every step."""
    assert first_lrs(ConstantLr(0.25), 4) == [0.25] * 4


def test_linear_first_steps() -> None:
    """LinearLr: step 1 is exactly initial_lr, step num_iters+1 and after exactly final_lr."""
    lrs = first_lrs(LinearLr(0.5, 0.1, 4), 7)
    assert lrs[0] == 0.5
    assert lrs[1:4] == pytest.approx([0.4, 0.3, 0.2], rel=1e-12)
    assert lrs[4:] == [0.1, 0.1, 0.1]


def test_linear_warms_up_when_final_is_larger() -> None:
    """LinearLr also goes upwards (a linear warm-up)."""
    assert first_lrs(LinearLr(0.25, 1.0, 3), 5) == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_cosine_first_steps() -> None:
    """CosineAnnealingLr uses t = step - 1 and goes back up after num_iters (no restart)."""
    lrs = first_lrs(CosineAnnealingLr(1.0, 4), 7)
    c = math.cos(math.pi / 4)
    expected = [1.0, (1 + c) / 2, 0.5, (1 - c) / 2, 0.0, (1 - c) / 2, 0.5]
    assert lrs == pytest.approx(expected, abs=1e-15)


def test_cosine_respects_min_lr() -> None:
    """CosineAnnealingLr goes from initial_lr down to min_lr at step num_iters + 1."""
    lrs = first_lrs(CosineAnnealingLr(0.5, 2, min_lr=0.1), 3)
    assert lrs == pytest.approx([0.5, 0.3, 0.1], abs=1e-15)


def test_exponential_first_steps() -> None:
    """ExponentialLr is initial_lr * gamma ** (step - 1)."""
    assert first_lrs(ExponentialLr(0.8, 0.5), 4) == [0.8, 0.4, 0.2, 0.1]


def test_step_first_steps() -> None:
    """StepLr is initial_lr * gamma ** ((step - 1) // step_size)."""
    assert first_lrs(StepLr(1.0, 2, gamma=0.5), 6) == [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]


def test_step_default_gamma_is_a_tenth() -> None:
    """StepLr's gamma defaults to 0.1."""
    assert first_lrs(StepLr(1.0, 1), 3) == pytest.approx([1.0, 0.1, 0.01], rel=1e-15)


def test_noam_first_steps() -> None:
    """NoamLr is factor * model_size**-0.5 * min(step**-0.5, step * warmup**-1.5)."""
    lrs = first_lrs(NoamLr(2.0, warmup_steps=4, model_size=16), 5)
    # 2 * 16**-0.5 = 0.5; warm-up 0.5 * k / 8 up to step 4, then 0.5 / sqrt(k)
    assert lrs == pytest.approx([0.0625, 0.125, 0.1875, 0.25, 0.5 / math.sqrt(5)], rel=1e-15)


def test_noam_defaults() -> None:
    """NoamLr defaults to warmup_steps=4000 and model_size=512."""
    assert NoamLr(1.0).step() == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-15)


def test_initial_lr_above_one_is_accepted() -> None:
    """Unlike Burn, an initial lr above 1 is accepted."""
    assert LinearLr(5.0, 0.0, 2).step() == 5.0
    assert CosineAnnealingLr(3.0, 10).step() == 3.0
    assert ExponentialLr(2.0, 0.5).step() == 2.0


N = 40


def test_linear_matches_torch_linear_lr_decay() -> None:
    """LinearLr(a, b, n) with b < a follows torch LinearLR(lr=a, 1, b/a, n)."""
    ours = first_lrs(LinearLr(0.3, 0.05, 7), N)
    theirs = torch_sequence(lambda o: tl.LinearLR(o, 1.0, 0.05 / 0.3, 7), 0.3, N)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)


def test_linear_matches_torch_linear_lr_warmup() -> None:
    """LinearLr(a, b, n) with a < b follows torch LinearLR(lr=b, a/b, 1, n)."""
    ours = first_lrs(LinearLr(0.01, 0.2, 5), N)
    theirs = torch_sequence(lambda o: tl.LinearLR(o, 0.01 / 0.2, 1.0, 5), 0.2, N)
    assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("min_lr", [0.0, 0.02])
def test_cosine_matches_torch_cosine_annealing(min_lr: float) -> None:
    """CosineAnnealingLr follows torch CosineAnnealingLR, also past num_iters."""
    ours = first_lrs(CosineAnnealingLr(0.1, 9, min_lr=min_lr), N)
    theirs = torch_sequence(lambda o: tl.CosineAnnealingLR(o, T_max=9, eta_min=min_lr), 0.1, N)
    assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-15)


def test_exponential_matches_torch_exponential_lr() -> None:
    """ExponentialLr follows torch ExponentialLR."""
    ours = first_lrs(ExponentialLr(0.1, 0.9), N)
    theirs = torch_sequence(lambda o: tl.ExponentialLR(o, gamma=0.9), 0.1, N)
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_step_matches_torch_step_lr() -> None:
    """StepLr follows torch StepLR."""
    ours = first_lrs(StepLr(0.1, 3, gamma=0.7), N)
    theirs = torch_sequence(lambda o: tl.StepLR(o, step_size=3, gamma=0.7), 0.1, N)
    assert ours == pytest.approx(theirs, rel=1e-12)
