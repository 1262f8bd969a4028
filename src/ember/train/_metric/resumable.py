"""A metric's running state, saved in a mid-round checkpoint and restored on resume.

A checkpoint taken inside a round (``checkpoint_every(steps=N)``, or a stop inside a round,
``docs/training.md``, "Mid-round checkpoints") must hold every train metric's state for the
epoch so far, so that a resumed run logs the same batch lines and the same epoch value as one
that never stopped. A metric that can be saved has two more methods (:class:`StatefulMetric`)::

    def state_dict(self) -> dict[str, Any]          # JSON values and tensors, a fresh copy
    def load_state_dict(self, state: dict[str, Any]) -> None

The state is JSON (str keys; lists, numbers, strings, None) and tensors, stored in the
checkpoint's safetensors and JSON files (never pickled). Every built-in metric has them. A
``torch.nn.Module`` metric's inherited ``nn.Module.state_dict`` does not count: it holds the
module's parameters and buffers, not the epoch's running sums.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import torch

__all__ = [
    "StatefulMetric",
    "check_state_fields",
    "has_metric_state",
    "state_count",
    "state_float",
    "state_tensor",
]


@runtime_checkable
class StatefulMetric(Protocol):
    """A metric whose state for the epoch so far can be saved and restored (see the module
    doc)."""

    def state_dict(self) -> dict[str, Any]:
        """The running state: JSON values and tensors (copies: the metric goes on changing)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a ``state_dict()``; ValueError naming what does not fit."""
        ...


def has_metric_state(metric: object) -> bool:
    """Whether ``metric`` saves its running state (its own ``state_dict``, not the one every
    ``nn.Module`` has)."""
    if not isinstance(metric, StatefulMetric) or not callable(metric.state_dict):
        return False
    return not isinstance(metric, torch.nn.Module) or (
        type(metric).state_dict is not torch.nn.Module.state_dict
    )


def check_state_fields(owner: object, state: object, fields: Sequence[str]) -> Mapping[str, Any]:
    """``state`` if it is a mapping with every one of ``fields``; ValueError naming the metric
    and the missing field otherwise."""
    if not isinstance(state, Mapping):
        raise ValueError(f"the saved state of metric {_name(owner)!r} is not a mapping: {state!r}")
    for field in fields:
        if field not in state:
            raise ValueError(
                f"the saved state of metric {_name(owner)!r} has no {field!r} (it has "
                f"{sorted(state)}): it was saved by another kind of metric"
            )
    return state


def state_float(state: Mapping[str, Any], owner: object, field: str) -> float:
    """The saved number ``state[field]`` as a float (NaN is kept); ValueError naming the field
    otherwise."""
    value = state[field]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(
            f"the saved state of metric {_name(owner)!r} holds {field}={value!r}, not a number"
        )
    return float(value)


def state_count(state: Mapping[str, Any], owner: object, field: str) -> int:
    """The saved count ``state[field]``; ValueError naming the field unless it is an int >= 0."""
    value = state[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"the saved state of metric {_name(owner)!r} holds {field}={value!r}, not a count"
        )
    return value


def state_tensor(state: Mapping[str, Any], owner: object, field: str) -> torch.Tensor | None:
    """The saved tensor ``state[field]`` (None when none was saved); ValueError otherwise. It is
    on the CPU: a metric moves it to its batches' device at its next update."""
    value = state[field]
    if value is not None and not isinstance(value, torch.Tensor):
        raise ValueError(
            f"the saved state of metric {_name(owner)!r} holds {field}={value!r}, not a tensor"
        )
    return value


def _name(owner: object) -> str:
    return str(getattr(owner, "name", type(owner).__name__))
