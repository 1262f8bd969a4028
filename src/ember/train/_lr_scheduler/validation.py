"""The checks every scheduler shares: constructor arguments and loaded state dicts.

Arguments are checked in the constructor and a bad one raises ``TypeError`` (wrong type) or
``ValueError`` (out of range), naming the argument and the value. A state dict must be a dict
tagged with the scheduler's ``"kind"`` and hold exactly the expected keys, so that loading the
state of another scheduler, or a truncated one, fails loudly instead of half-restoring.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

__all__ = ["check_int", "check_real", "check_state", "state_count"]


def check_real(
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


def check_int(name: str, value: object, *, minimum: int) -> int:
    """``value`` as an int >= ``minimum``, or an error naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__qualname__}")
    number = int(value)
    if number < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {number}")
    return number


def check_state(state: object, owner: object, kind: str, keys: tuple[str, ...]) -> None:
    """Check that ``state`` is a dict of ``kind`` with exactly ``keys`` besides ``"kind"``."""
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


def state_count(state: dict[str, Any], key: str, owner: object) -> int:
    """``state[key]`` as a counter: an int >= 0 (not a bool), or a ``ValueError``."""
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{type(owner).__name__} state[{key!r}] must be an int >= 0, got {value!r}"
        )
    return value
