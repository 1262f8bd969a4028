"""Schedules of schedules: :class:`ComposedLr` combines children, :class:`SequentialLr` chains them.

Children are anything :func:`~ember.train._lr_scheduler.base.as_scheduler` accepts. Their states
nest under ``"schedulers"``, and loading is all or nothing: if one child rejects its state,
every child is put back as it was.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

from ember._checks import check_int
from ember.train._lr_scheduler.base import (
    EpochLrScheduler,
    LrScheduler,
    LrSchedulerLike,
    as_scheduler,
)
from ember.train._lr_scheduler.torch_adapter import TorchLrScheduler
from ember.train._lr_scheduler.validation import check_state, state_count

__all__ = ["ComposedLr", "Reduction", "SequentialLr"]


Reduction: TypeAlias = Literal["prod", "sum", "avg"]
"""How :class:`ComposedLr` combines its children's lrs."""

_REDUCTIONS: tuple[Reduction, ...] = ("prod", "sum", "avg")


class ComposedLr:
    """Several schedules combined: every child is stepped on every call, then reduced.

    ``reduction`` is ``"prod"`` (the product, e.g. a cosine times a warm-up factor), ``"sum"`` or
    ``"avg"`` (the sum divided by the number of children). Children may be anything
    ``as_scheduler`` accepts; a float is a constant factor or term. At least one child is
    required, and one scheduler object cannot appear twice (it would be stepped twice per call).
    """

    __slots__ = ("_reduction", "_schedulers")

    def __init__(
        self, schedulers: Sequence[LrSchedulerLike], reduction: Reduction = "prod"
    ) -> None:
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}")
        self._reduction: Reduction = reduction
        self._schedulers = _children(schedulers, "ComposedLr")

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
        check_state(state, self, "composed", ("schedulers",))
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
        self._schedulers = _children(schedulers, "SequentialLr")
        checked = [check_int(f"milestones[{i}]", m, minimum=1) for i, m in enumerate(milestones)]
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
        check_state(state, self, "sequential", ("step", "schedulers"))
        step = state_count(state, "step", self)
        _load_children(self, self._schedulers, state["schedulers"])
        self._step = step

    def __repr__(self) -> str:
        return (
            f"SequentialLr({list(self._schedulers)!r}, milestones={list(self._milestones)}, "
            f"step={self._step})"
        )


def _children(schedulers: Sequence[LrSchedulerLike], owner: str) -> tuple[LrScheduler, ...]:
    """The children as schedulers: a non-empty list, no object twice, none that advances per
    epoch (``owner`` steps its children per optimizer step and never ends their epochs: such a
    child would keep its first lr for the whole run)."""
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
        if _per_epoch(child):
            raise ValueError(
                f"schedulers[{i}] ({child!r}) advances once per epoch, but {owner} steps its "
                "children once per optimizer step and never ends their epochs, so it would keep "
                "its first lr for the whole run: hand a per-epoch scheduler to the Learner on "
                "its own, or wrap a torch scheduler as TorchLrScheduler(scheduler, "
                'interval="step")'
            )
    return children


def _per_epoch(child: LrScheduler) -> bool:
    """Whether ``child`` advances only when an epoch ends (``interval="epoch"``,
    ``ReduceLROnPlateau``, or a user's :class:`EpochLrScheduler`)."""
    if isinstance(child, TorchLrScheduler):
        return child.interval == "epoch"
    return isinstance(child, EpochLrScheduler)


def _load_children(owner: object, children: tuple[LrScheduler, ...], states: object) -> None:
    """Load one state into each child; on an error every child is put back as it was."""
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
