"""Learning-rate schedulers: the lr the Learner uses for each optimizer update.

A scheduler is anything with ``step() -> float``, ``state_dict()`` and ``load_state_dict()``
(:class:`LrScheduler`). ``step()`` advances the schedule and returns the lr to use *now*; the first
call is step 1. The Learner calls it once right before each optimizer update and writes the value
into every param group of the optimizer (DESIGN §2); a bare float is a constant schedule
(:func:`as_scheduler`).

Shipped schedules (Burn's, reference §9), for step ``k = 1, 2, …``::

    ConstantLr(lr)                                   lr
    LinearLr(initial_lr, final_lr, num_iters)        initial_lr at k = 1, moving linearly to
                                                     final_lr at k = num_iters + 1, then final_lr
    CosineAnnealingLr(initial_lr, num_iters, min_lr) min_lr + (initial_lr - min_lr)
                                                     * (1 + cos(pi * (k - 1) / num_iters)) / 2
                                                     (goes on past num_iters, back up: no restart)
    ExponentialLr(initial_lr, gamma)                 initial_lr * gamma ** (k - 1)
    StepLr(initial_lr, step_size, gamma)             initial_lr * gamma ** ((k - 1) // step_size)
    NoamLr(factor, warmup_steps, model_size)         factor * model_size ** -0.5
                                                     * min(k ** -0.5, k * warmup_steps ** -1.5)
    ComposedLr(schedulers, reduction)                prod / sum / avg of all children, every
                                                     child stepped on every call
    SequentialLr(schedulers, milestones)             one child at a time (warm-up, then another)
    TorchLrScheduler(torch_scheduler)                any ``torch.optim.lr_scheduler.LRScheduler``

Where ember differs from Burn:

* initial lrs above 1 are accepted (PyTorch users use them); they must still be finite and > 0;
* every closed form is computed from an integer step counter, so a resumed schedule continues with
  exactly the values of an uninterrupted one (Burn's exponential schedule multiplies its previous
  lr, and its record stores that float);
* invalid arguments raise ``ValueError`` (``TypeError`` for a wrong type) in the constructor, naming
  the argument and the value. Beyond Burn's checks, ember rejects a StepLr ``initial_lr`` or
  ``gamma`` <= 0 (Burn only warns), a Noam ``factor`` <= 0, non-finite numbers and an empty
  ``ComposedLr`` (Burn's empty product is a constant 1.0);
* ``state_dict()`` is a JSON-serialisable dict tagged with the scheduler's ``"kind"``; loading a
  state of another kind, or one with a missing or unexpected key, raises ``ValueError`` (Burn leaves
  the state unchanged when a key is missing).

State dicts hold counters, not configuration: load a state into a scheduler built with the same
arguments. ``LinearLr(...).state_dict() == {"kind": "linear", "step": 3}`` after three calls;
``ComposedLr`` and ``SequentialLr`` nest their children's states under ``"schedulers"``.
"""

from __future__ import annotations

import bisect
import collections
import math
import numbers
import warnings
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, Protocol, TypeAlias, runtime_checkable

import torch
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

__all__ = [
    "ComposedLr",
    "ConstantLr",
    "CosineAnnealingLr",
    "ExponentialLr",
    "LinearLr",
    "LrScheduler",
    "LrSchedulerLike",
    "NoamLr",
    "SequentialLr",
    "StepLr",
    "TorchLrScheduler",
    "as_scheduler",
]


@runtime_checkable
class LrScheduler(Protocol):
    """A learning-rate schedule, stepped once before each optimizer update.

    Any object with these three methods is one; ember's schedulers and :class:`TorchLrScheduler`
    are.
    """

    def step(self) -> float:
        """Advance the schedule and return the lr to use now; the first call is step 1."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The counters needed to continue the schedule, as JSON values (dicts, lists, numbers…)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore counters from :meth:`state_dict`; the schedule goes on where it was saved."""
        ...


LrSchedulerLike: TypeAlias = LrScheduler | float | LRScheduler
"""What the Learner and the composite schedulers accept; see :func:`as_scheduler`."""


def as_scheduler(value: LrSchedulerLike) -> LrScheduler:
    """Turn what a user passes as a learning rate into an :class:`LrScheduler`.

    A real number (``float``, ``int``, numpy scalar; not ``bool``) becomes a :class:`ConstantLr`,
    a ``torch.optim.lr_scheduler.LRScheduler`` is wrapped in a :class:`TorchLrScheduler`, and an
    :class:`LrScheduler` is returned as is. Anything else raises ``TypeError``.
    """
    if isinstance(value, bool):
        raise TypeError(f"a learning rate cannot be a bool, got {value!r}; {_ACCEPTED}")
    if isinstance(value, numbers.Real):
        return ConstantLr(float(value))
    if isinstance(value, LRScheduler):
        return TorchLrScheduler(value)
    if isinstance(value, torch.optim.Optimizer):
        # An optimizer has step/state_dict/load_state_dict too, so the protocol check would pass.
        raise TypeError(
            f"got an optimizer ({type(value).__qualname__}) where a learning rate scheduler is "
            f"expected; {_ACCEPTED}"
        )
    if isinstance(value, LrScheduler):
        return value
    raise TypeError(f"cannot use a {type(value).__qualname__} as a learning rate; {_ACCEPTED}")


_ACCEPTED = (
    "expected an LrScheduler (step/state_dict/load_state_dict), a float (constant lr) "
    "or a torch.optim.lr_scheduler.LRScheduler"
)


class ConstantLr:
    """The same lr at every step (a bare float passed to the Learner becomes one).

    ``lr`` must be finite and >= 0.
    """

    __slots__ = ("_lr",)

    def __init__(self, lr: float) -> None:
        self._lr = _check_real("lr", lr, minimum=0.0)

    def step(self) -> float:
        """Return ``lr``."""
        return self._lr

    def state_dict(self) -> dict[str, Any]:
        """``{"kind": "constant"}``: a constant has no counter."""
        return {"kind": "constant"}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that ``state`` is a constant's state; there is nothing to restore."""
        _check_state(state, self, "constant", ())

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
        _check_state(state, self, self._KIND, ("step",))
        self._step = _state_count(state, "step", self)

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
        self._initial = _check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._final = _check_real("final_lr", final_lr, minimum=0.0)
        self._num_iters = _check_int("num_iters", num_iters, minimum=1)

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
        self._initial = _check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._num_iters = _check_int("num_iters", num_iters, minimum=1)
        self._min = _check_real("min_lr", min_lr, minimum=0.0)
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
        self._initial = _check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._gamma = _check_real("gamma", gamma, minimum=0.0, strict=True, maximum=1.0)

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
        self._initial = _check_real("initial_lr", initial_lr, minimum=0.0, strict=True)
        self._step_size = _check_int("step_size", step_size, minimum=1)
        self._gamma = _check_real("gamma", gamma, minimum=0.0, strict=True)

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
        self._factor = _check_real("factor", factor, minimum=0.0, strict=True)
        self._warmup = _check_int("warmup_steps", warmup_steps, minimum=1)
        self._model_size = _check_int("model_size", model_size, minimum=1)

    def _lr_at(self, step: int) -> float:
        # math.pow: float ** float is typed Any (a negative base would give a complex).
        scale = self._factor * math.pow(self._model_size, -0.5)
        return scale * min(math.pow(step, -0.5), step * math.pow(self._warmup, -1.5))

    def _config(self) -> str:
        return (
            f"factor={self._factor!r}, warmup_steps={self._warmup}, model_size={self._model_size}"
        )


Reduction: TypeAlias = Literal["prod", "sum", "avg"]
_REDUCTIONS: tuple[Reduction, ...] = ("prod", "sum", "avg")


class ComposedLr:
    """Several schedules combined: every child is stepped on every call, then reduced.

    ``reduction`` is ``"prod"`` (the product, e.g. a cosine times a warm-up factor), ``"sum"`` or
    ``"avg"`` (the sum divided by the number of children). Children may be anything
    :func:`as_scheduler` accepts; a float is a constant factor or term. At least one child is
    required, and one scheduler object cannot appear twice (it would be stepped twice per call).
    """

    __slots__ = ("_reduction", "_schedulers")

    def __init__(
        self, schedulers: Sequence[LrSchedulerLike], reduction: Reduction = "prod"
    ) -> None:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self._reduction: Reduction = reduction
        self._schedulers = _children(schedulers)

    @property
    def schedulers(self) -> tuple[LrScheduler, ...]:
        """The children, in order."""
        return self._schedulers

    def step(self) -> float:
        """Step every child once and combine their lrs."""
        lrs = [scheduler.step() for scheduler in self._schedulers]
        if self._reduction == "prod":
            return math.prod(lrs)
        # A plain left-to-right sum, as Burn folds it; builtin sum() is compensated on 3.12+ and
        # would make results depend on the Python version.
        total = 0.0
        for lr in lrs:
            total += lr
        return total if self._reduction == "sum" else total / len(lrs)

    def state_dict(self) -> dict[str, Any]:
        """``{"kind": "composed", "schedulers": [child states…]}``."""
        return {
            "kind": "composed",
            "schedulers": [scheduler.state_dict() for scheduler in self._schedulers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore every child; on an error no child is left changed."""
        _check_state(state, self, "composed", ("schedulers",))
        _load_children(self, self._schedulers, state["schedulers"])

    def __repr__(self) -> str:
        return f"ComposedLr({list(self._schedulers)!r}, reduction={self._reduction!r})"


class SequentialLr:
    """One schedule after another: child ``i`` runs from milestone ``i - 1`` to milestone ``i``.

    With ``milestones = [m]``, calls 1…m are steps 1…m of ``schedulers[0]`` and call ``m + 1`` is
    step 1 of ``schedulers[1]`` (a warm-up of ``m`` steps, then the main schedule from its start).
    Only the active child is stepped. Validation: at least one scheduler,
    ``len(milestones) == len(schedulers) - 1``, milestones >= 1 and strictly increasing.
    """

    __slots__ = ("_milestones", "_schedulers", "_step")

    def __init__(self, schedulers: Sequence[LrSchedulerLike], milestones: Sequence[int]) -> None:
        self._schedulers = _children(schedulers)
        checked = [_check_int(f"milestones[{i}]", m, minimum=1) for i, m in enumerate(milestones)]
        if len(checked) != len(self._schedulers) - 1:
            raise ValueError(
                f"milestones must have len(schedulers) - 1 = {len(self._schedulers) - 1} "
                f"entries, got {len(checked)}: {checked}"
            )
        for i in range(1, len(checked)):
            if checked[i] <= checked[i - 1]:
                raise ValueError(f"milestones must be strictly increasing, got {checked}")
        self._milestones = tuple(checked)
        self._step = 0

    @property
    def schedulers(self) -> tuple[LrScheduler, ...]:
        """The children, in order."""
        return self._schedulers

    def step(self) -> float:
        """Step the child whose turn it is and return its lr."""
        # _step is the number of completed calls: child i is active while milestones[i-1] <= _step.
        active = bisect.bisect_right(self._milestones, self._step)
        lr = self._schedulers[active].step()
        self._step += 1
        return lr

    def state_dict(self) -> dict[str, Any]:
        """``{"kind": "sequential", "step": calls so far, "schedulers": [child states…]}``."""
        return {
            "kind": "sequential",
            "step": self._step,
            "schedulers": [scheduler.state_dict() for scheduler in self._schedulers],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the call counter and every child; on an error nothing is left changed."""
        _check_state(state, self, "sequential", ("step", "schedulers"))
        step = _state_count(state, "step", self)
        _load_children(self, self._schedulers, state["schedulers"])
        self._step = step

    def __repr__(self) -> str:
        return (
            f"SequentialLr({list(self._schedulers)!r}, milestones={list(self._milestones)}, "
            f"step={self._step})"
        )


class TorchLrScheduler:
    """Adapter: a ``torch.optim.lr_scheduler.LRScheduler`` as an ember :class:`LrScheduler`.

    PyTorch's loop is ``optimizer.step(); scheduler.step()``: the lr used by the k-th optimizer
    step is ``scheduler.get_last_lr()`` *before* the k-th ``scheduler.step()`` (the first one is the
    value set when the scheduler was built). ember's Learner instead asks for the lr *before* each
    optimizer step. The adapter reconciles the two lazily:

    * the first ``step()`` returns ``get_last_lr()[0]`` without advancing the torch scheduler;
    * every later ``step()`` first advances it with ``scheduler.step()`` and returns the new
      ``get_last_lr()[0]``. That advance comes after the previous optimizer step, as PyTorch
      requires, so its "lr_scheduler.step() before optimizer.step()" warning does not fire.

    So the k-th lr handed out is exactly the lr of the k-th optimizer step of the canonical torch
    loop. Wrap a scheduler built on the optimizer the Learner steps (its wrapped ``step`` is how
    torch checks the order). Right before advancing, the adapter puts the torch scheduler's own
    last lrs back into that optimizer's param groups: chainable schedulers (``ExponentialLR``,
    ``CosineAnnealingLR``, …) compute the next lr from ``group["lr"]``, so whatever was written
    there since (the Learner writes the lr it uses, which for a :class:`ComposedLr` child is the
    combined one) cannot bend the schedule, and a scheduler restored by :meth:`load_state_dict`
    continues exactly even when the optimizer's state was not restored.

    Param groups: ``step()`` returns group 0's lr, and the Learner writes that one lr into every
    group, so per-group lrs of a torch scheduler are not used by it; :meth:`step_all` advances
    the same way and returns every group's lr, for callers that apply them per group. Other
    hyper-parameters a torch scheduler drives (momentum in ``OneCycleLR``, ``CyclicLR``) live in
    the optimizer and are restored with the optimizer's state.

    State: ``{"kind": "torch", "class": "<torch class name>", "step": calls so far,
    "scheduler": <the torch scheduler's state_dict as JSON>}``. Tensors (tensor lrs) are stored as
    ``{"__tensor__": {"dtype", "data"}}`` and come back on the CPU; ``Counter`` objects and dicts
    with non-string keys (``MultiStepLR``'s milestones) as ``{"__counter__"|"__dict__": [[key,
    value], …]}``. Plain functions and lambdas (``LambdaLR``, ``CyclicLR``'s ``scale_fn``) are
    not part of torch's state: the new scheduler must be built with them again. A callable
    *object* is saved through its ``__dict__``; a value that cannot be made JSON makes
    :meth:`state_dict` raise ``TypeError`` naming where it is.

    ``ReduceLROnPlateau`` is not accepted: it needs a metric value at each step.
    """

    __slots__ = ("_resumed", "_scheduler", "_step")

    def __init__(self, scheduler: LRScheduler) -> None:
        if isinstance(scheduler, ReduceLROnPlateau):
            raise TypeError(
                "ReduceLROnPlateau cannot be adapted: its step() needs a metric value, and ember "
                "steps schedulers before each optimizer update without one"
            )
        if not isinstance(scheduler, LRScheduler):
            raise TypeError(
                "scheduler must be a torch.optim.lr_scheduler.LRScheduler, "
                f"got {type(scheduler).__qualname__}"
            )
        self._scheduler = scheduler
        self._step = 0
        # True between load_state_dict() and the first advance after it (see _advance).
        self._resumed = False

    @property
    def scheduler(self) -> LRScheduler:
        """The wrapped torch scheduler."""
        return self._scheduler

    def step(self) -> float:
        """Return the lr of param group 0 for the coming optimizer step (see the class doc)."""
        if self._step > 0:
            self._advance()
        self._step += 1
        return float(self._scheduler.get_last_lr()[0])

    def step_all(self) -> list[float]:
        """Like :meth:`step`, but return the lr of every param group, in group order."""
        self.step()
        return [float(lr) for lr in self._scheduler.get_last_lr()]

    def _advance(self) -> None:
        # Chainable torch schedulers compute the next lr from group["lr"]: give them back their
        # own last value, whatever the Learner (or a ComposedLr) has written there since.
        groups = self._scheduler.optimizer.param_groups
        for group, lr in zip(groups, self._scheduler.get_last_lr(), strict=True):
            _set_group_lr(group, lr)
        if not self._resumed:
            self._scheduler.step()
            return
        self._resumed = False
        # The optimizer step this advance follows happened before the checkpoint, so on a fresh
        # optimizer torch's "called before optimizer.step()" check (made only on the scheduler's
        # first real step) would be a false alarm; it is silenced for this one call only.
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`",
                category=UserWarning,
            )
            self._scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        """The adapter's call counter and the torch scheduler's state, as JSON values."""
        return {
            "kind": "torch",
            "class": type(self._scheduler).__qualname__,
            "step": self._step,
            "scheduler": _to_json(self._scheduler.state_dict(), "scheduler"),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the call counter and the torch scheduler's state."""
        _check_state(state, self, "torch", ("class", "step", "scheduler"))
        expected = type(self._scheduler).__qualname__
        if state["class"] != expected:
            raise ValueError(
                f"cannot load the state of a torch {state['class']!r} into a TorchLrScheduler "
                f"wrapping {expected!r}"
            )
        step = _state_count(state, "step", self)
        torch_state = state["scheduler"]
        if not isinstance(torch_state, dict):
            raise ValueError(
                f"TorchLrScheduler state['scheduler'] must be a dict, "
                f"got {type(torch_state).__qualname__}"
            )
        decoded = _from_json(torch_state)
        before = self._scheduler.state_dict()
        self._scheduler.load_state_dict(decoded)
        groups = len(self._scheduler.optimizer.param_groups)
        lrs = len(self._scheduler.get_last_lr())
        if lrs != groups:
            self._scheduler.load_state_dict(before)
            raise ValueError(
                f"the loaded torch scheduler state has {lrs} lrs but the optimizer has {groups} "
                "param groups"
            )
        self._step = step
        self._resumed = step > 0

    def __repr__(self) -> str:
        last = [float(lr) for lr in self._scheduler.get_last_lr()]
        return (
            f"TorchLrScheduler({type(self._scheduler).__qualname__}, last_lr={last}, "
            f"step={self._step})"
        )


# --- argument checks -------------------------------------------------------------------------


def _check_real(
    name: str,
    value: object,
    *,
    minimum: float,
    strict: bool = False,
    maximum: float | None = None,
) -> float:
    """``value`` as a finite float within bounds, or an error naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__qualname__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if strict and not number > minimum:
        raise ValueError(f"{name} must be > {minimum:g}, got {value!r}")
    if not number >= minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    if maximum is not None and number > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value!r}")
    return number


def _check_int(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__qualname__}")
    number = int(value)
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def _children(schedulers: Sequence[LrSchedulerLike]) -> tuple[LrScheduler, ...]:
    if isinstance(schedulers, str | bytes) or not isinstance(schedulers, Sequence):
        raise TypeError(
            f"schedulers must be a list of schedulers, got {type(schedulers).__qualname__}"
        )
    if not schedulers:
        raise ValueError("schedulers must not be empty")
    children = tuple(as_scheduler(scheduler) for scheduler in schedulers)
    for i, child in enumerate(children):
        for j in range(i):
            if children[j] is child:
                raise ValueError(
                    f"schedulers[{i}] is the same object as schedulers[{j}]; it would be stepped "
                    "twice per call: pass separate instances"
                )
    return children


# --- state checks ----------------------------------------------------------------------------


def _check_state(state: object, owner: object, kind: str, keys: tuple[str, ...]) -> None:
    name = type(owner).__name__
    if not isinstance(state, dict):
        raise TypeError(f"{name} state must be a dict, got {type(state).__qualname__}")
    if "kind" not in state:
        raise ValueError(f"{name} state is missing key 'kind'")
    if state["kind"] != kind:
        raise ValueError(
            f"cannot load the state of a {state['kind']!r} scheduler into {name} (kind {kind!r})"
        )
    for key in keys:
        if key not in state:
            raise ValueError(f"{name} state is missing key {key!r}")
    unexpected = sorted(str(key) for key in state if key != "kind" and key not in keys)
    if unexpected:
        raise ValueError(f"{name} state has unexpected key(s) {unexpected}")


def _state_count(state: dict[str, Any], key: str, owner: object) -> int:
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{type(owner).__name__} state[{key!r}] must be an int >= 0, got {value!r}"
        )
    return value


def _load_children(owner: object, children: tuple[LrScheduler, ...], states: object) -> None:
    name = type(owner).__name__
    if not isinstance(states, list) or len(states) != len(children):
        found = f"{len(states)} states" if isinstance(states, list) else type(states).__qualname__
        raise ValueError(
            f"{name} state['schedulers'] must be a list of {len(children)} child states, "
            f"got {found}"
        )
    before = [child.state_dict() for child in children]
    try:
        for child, child_state in zip(children, states, strict=True):
            child.load_state_dict(child_state)
    except BaseException:
        # Leave every child as it was, so a failed load does not half-restore the schedule.
        for child, child_state in zip(children, before, strict=True):
            child.load_state_dict(child_state)
        raise


# --- torch state <-> JSON --------------------------------------------------------------------

_TENSOR = "__tensor__"
_COUNTER = "__counter__"
_DICT = "__dict__"


def _to_json(value: object, where: str) -> Any:
    """A JSON-compatible copy of a torch scheduler state; ``where`` names the position in errors."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return {_TENSOR: {"dtype": dtype, "data": value.detach().cpu().tolist()}}
    if isinstance(value, list | tuple):
        return [_to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        if type(value) is dict and all(isinstance(key, str) for key in value):
            return {key: _to_json(item, f"{where}.{key}") for key, item in value.items()}
        tag = _COUNTER if isinstance(value, collections.Counter) else _DICT
        return {
            tag: [
                [_to_json(key, f"{where} key"), _to_json(item, f"{where}[{key!r}]")]
                for key, item in value.items()
            ]
        }
    raise TypeError(
        f"torch scheduler state {where} is a {type(value).__qualname__}, which cannot be stored "
        "as JSON"
    )


def _from_json(value: Any) -> Any:
    """Undo :func:`_to_json`."""
    if isinstance(value, list):
        return [_from_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and _TENSOR in value:
        spec = value[_TENSOR]
        dtype = getattr(torch, str(spec["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown tensor dtype {spec['dtype']!r} in torch scheduler state")
        return torch.tensor(spec["data"], dtype=dtype)
    if len(value) == 1 and (_COUNTER in value or _DICT in value):
        pairs = [(_hashable(_from_json(key)), _from_json(item)) for key, item in _single(value)]
        return collections.Counter(dict(pairs)) if _COUNTER in value else dict(pairs)
    return {key: _from_json(item) for key, item in value.items()}


def _single(value: dict[str, Any]) -> list[list[Any]]:
    (pairs,) = value.values()
    if not isinstance(pairs, list):
        raise ValueError(f"malformed torch scheduler state entry {value!r}")
    return pairs


def _hashable(key: Any) -> Any:
    # A tuple key was stored as a list.
    return tuple(_hashable(item) for item in key) if isinstance(key, list) else key


def _set_group_lr(group: dict[str, Any], lr: float | torch.Tensor) -> None:
    # A tensor lr is updated in place: a capturable or compiled optimizer holds on to that tensor.
    current = group["lr"]
    if isinstance(current, torch.Tensor):
        current.fill_(lr)
    else:
        # get_last_lr() tensors must not alias a group's lr (torch fills group lrs in place).
        group["lr"] = lr.clone() if isinstance(lr, torch.Tensor) else lr
