"""The closed-form schedules: constant, linear, cosine, exponential, step and Noam.

Each lr is computed from an integer step counter (:class:`_CountedLr`), never from the previous
lr, so a schedule resumed from its state dict continues with exactly the values of an
uninterrupted one; see :mod:`ember.train._lr_scheduler` for the formulas side by side.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from ember._checks import check_int, check_real
from ember.train._lr_scheduler.validation import check_state, state_count

__all__ = ["ConstantLr", "CosineAnnealingLr", "ExponentialLr", "LinearLr", "NoamLr", "StepLr"]


class ConstantLr:
    """The same lr at every step (a bare float passed to the Learner becomes one).

    ``lr`` must be finite and >= 0.
    """

    __slots__ = ("_lr",)

    def __init__(self, lr: float) -> None:
        self._lr = check_real("lr", lr, minimum=0.0)

    def step(self) -> float:
        """Return ``lr``."""
        return self._lr

    def state_dict(self) -> dict[str, Any]:
        """``{"kind": "constant"}``: a constant has no counter."""
        return {"kind": "constant"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that ``state`` is a constant's state; there is nothing to restore."""
        check_state(state, self, "constant", ())

    def __repr__(self) -> str:
        return f"ConstantLr(lr={self._lr!r})"


class _CountedLr:
    """Base of the closed-form schedules: an integer step counter and ``_lr_at(k)``."""

    __slots__ = ("_step",)
    _KIND: ClassVar[str]

    def __init__(self) -> None:
        self._step = 0

    def step(self) -> float:
        """Advance one step and return the lr for it."""
        self._step += 1
        return self._lr_at(self._step)

    def _lr_at(self, step: int) -> float:
        raise NotImplementedError

    def _config(self) -> str:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """``{"kind": …, "step": number of calls to step() so far}``."""
        return {"kind": self._KIND, "step": self._step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the step counter from :meth:`state_dict`."""
        check_state(state, self, self._KIND, ("step",))
        self._step = state_count(state, "step", self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._config()}, step={self._step})"


class LinearLr(_CountedLr):
    """Linear from ``initial_lr`` (step 1) to ``final_lr`` (step ``num_iters + 1`` and after).

    Both ends are exact: step 1 returns ``initial_lr`` and every step from ``num_iters + 1`` on
    returns ``final_lr``. Validation: ``initial_lr > 0``, ``final_lr >= 0`` (Burn also caps both
    at 1), ``num_iters >= 1``. Works in both directions, so it also serves as a linear warm-up.
    """

    __slots__ = ("_final", "_initial", "_num_iters")
    _KIND = "linear"

    def __init__(self, initial_lr: float, final_lr: float, num_iters: int) -> None:
        super().__init__()
        self._initial = check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._final = check_real("final_lr", final_lr, minimum=0.0)
        self._num_iters = check_int("num_iters", num_iters, minimum=1)

    def _lr_at(self, step: int) -> float:
        done = step - 1
        if done >= self._num_iters:
            return self._final
        return self._initial + (self._final - self._initial) * done / self._num_iters

    def _config(self) -> str:
        return (
            f"initial_lr={self._initial!r}, final_lr={self._final!r}, num_iters={self._num_iters}"
        )


class CosineAnnealingLr(_CountedLr):
    """Cosine from ``initial_lr`` (step 1) down to ``min_lr`` (step ``num_iters + 1``).

    With ``t = step - 1``: ``min_lr + (initial_lr - min_lr) * (1 + cos(pi * t / num_iters)) / 2``.
    Past ``num_iters`` it keeps following the cosine, back up, without restarting (like Burn and
    torch's ``CosineAnnealingLR``). Validation: ``initial_lr > 0``, ``0 <= min_lr <= initial_lr``,
    ``num_iters >= 1``.
    """

    __slots__ = ("_initial", "_min", "_num_iters")
    _KIND = "cosine"

    def __init__(self, initial_lr: float, num_iters: int, min_lr: float = 0.0) -> None:
        super().__init__()
        self._initial = check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._num_iters = check_int("num_iters", num_iters, minimum=1)
        self._min = check_real("min_lr", min_lr, minimum=0.0)
        if self._min > self._initial:
            raise ValueError(f"min_lr must be <= initial_lr ({self._initial!r}), got {min_lr!r}")

    def _lr_at(self, step: int) -> float:
        cosine = math.cos(math.pi * (step - 1) / self._num_iters)
        return self._min + (self._initial - self._min) * (1.0 + cosine) / 2.0

    def _config(self) -> str:
        return f"initial_lr={self._initial!r}, num_iters={self._num_iters}, min_lr={self._min!r}"


class ExponentialLr(_CountedLr):
    """``initial_lr * gamma ** (step - 1)``.

    Validation: ``initial_lr > 0``, ``0 < gamma <= 1``.
    """

    __slots__ = ("_gamma", "_initial")
    _KIND = "exponential"

    def __init__(self, initial_lr: float, gamma: float) -> None:
        super().__init__()
        self._initial = check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._gamma = check_real("gamma", gamma, minimum=0.0, strict=True, maximum=1.0)

    def _lr_at(self, step: int) -> float:
        return self._initial * self._gamma ** (step - 1)

    def _config(self) -> str:
        return f"initial_lr={self._initial!r}, gamma={self._gamma!r}"


class StepLr(_CountedLr):
    """``initial_lr * gamma ** ((step - 1) // step_size)``: decay by ``gamma`` every ``step_size``.

    Validation: ``initial_lr > 0``, ``gamma > 0`` (above 1 the lr grows), ``step_size >= 1``.
    """

    __slots__ = ("_gamma", "_initial", "_step_size")
    _KIND = "step"

    def __init__(self, initial_lr: float, step_size: int, gamma: float = 0.1) -> None:
        super().__init__()
        self._initial = check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._step_size = check_int("step_size", step_size, minimum=1)
        self._gamma = check_real("gamma", gamma, minimum=0.0, strict=True)

    def _lr_at(self, step: int) -> float:
        return self._initial * self._gamma ** ((step - 1) // self._step_size)

    def _config(self) -> str:
        return f"initial_lr={self._initial!r}, step_size={self._step_size}, gamma={self._gamma!r}"


class NoamLr(_CountedLr):
    """The Transformer schedule: linear warm-up, then decay with ``step ** -0.5``.

    ``factor * model_size ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)``; the peak is
    at ``step == warmup_steps``. Validation: ``factor > 0``, ``warmup_steps >= 1``,
    ``model_size >= 1``.
    """

    __slots__ = ("_factor", "_model_size", "_warmup")
    _KIND = "noam"

    def __init__(self, factor: float, warmup_steps: int = 4000, model_size: int = 512) -> None:
        super().__init__()
        self._factor = check_real("factor", factor, minimum=0.0, strict=True)
        self._warmup = check_int("warmup_steps", warmup_steps, minimum=1)
        self._model_size = check_int("model_size", model_size, minimum=1)

    def _lr_at(self, step: int) -> float:
        # math.pow: float ** float is typed Any (a negative base would give a complex).
        scale = self._factor * math.pow(self._model_size, -0.5)
        return scale * min(math.pow(step, -0.5), step * math.pow(self._warmup, -1.5))

    def _config(self) -> str:
        return (
            f"factor={self._factor!r}, warmup_steps={self._warmup}, model_size={self._model_size}"
        )
