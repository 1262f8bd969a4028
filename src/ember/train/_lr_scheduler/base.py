"""What a learning-rate scheduler is (:class:`LrScheduler`) and what may stand for one.

The Learner and the composite schedulers accept an :data:`LrSchedulerLike` and turn it into an
:class:`LrScheduler` with :func:`as_scheduler`, which is why this module knows the two concrete
schedulers a plain value becomes: :class:`~ember.train._lr_scheduler.schedules.ConstantLr` and
:class:`~ember.train._lr_scheduler.torch_adapter.TorchLrScheduler`.
"""

from __future__ import annotations

import numbers
from typing import Any, Protocol, TypeAlias, runtime_checkable

import torch
from torch.optim.lr_scheduler import LRScheduler

from ember.train._lr_scheduler.schedules import ConstantLr
from ember.train._lr_scheduler.torch_adapter import TorchLrScheduler

__all__ = ["EpochLrScheduler", "GroupLrScheduler", "LrScheduler", "LrSchedulerLike", "as_scheduler"]


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


@runtime_checkable
class GroupLrScheduler(LrScheduler, Protocol):
    """A scheduler that gives every param group its own lr (torch's schedulers do)."""

    def step_all(self) -> list[float]:
        """Like ``step``, but the lr of every param group, in group order."""
        ...


@runtime_checkable
class EpochLrScheduler(LrScheduler, Protocol):
    """A scheduler that advances once per epoch, after validation (``interval="epoch"``,
    ``ReduceLROnPlateau``); its ``step`` gives the current lr without advancing."""

    @property
    def monitor(self) -> str | None:
        """The validation metric whose epoch value each advance is given, or None."""
        ...

    def end_epoch(self, value: float | None) -> None:
        """Advance once: the epoch ended, with ``monitor``'s validation value (if any)."""
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
