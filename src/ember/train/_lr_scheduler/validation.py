"""The checks every scheduler's loaded state dict goes through.

Constructor arguments go through ``ember._checks``, like every public argument. A state dict
must be a dict tagged with the scheduler's ``"kind"`` and hold exactly the expected keys, so
that loading the state of another scheduler, or a truncated one, fails loudly instead of
half-restoring.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_state", "state_count"]


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
