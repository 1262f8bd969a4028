"""Argument checks shared by datasets, loaders and the builder.

Every public constructor and builder method validates its arguments at the call, so a bad value
is reported where it was written, with the argument's name and the value, not deep inside an
iteration.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["check_int", "check_seed", "check_slice"]


def check_int(name: str, value: Any, *, minimum: int | None) -> int:
    """``value`` as an int, if it is an integer (not a bool) and ``>= minimum`` (if given).

    Raises TypeError (not an integer) or ValueError (too small), naming ``name`` and the value.
    """
    # bool is an int subclass, but True as a batch size or seed is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_seed(value: Any, name: str = "seed") -> int:
    """A shuffle seed: a non-negative int (numpy's SeedSequence takes no negative entropy)."""
    return check_int(name, value, minimum=0)


def check_slice(start: Any, end: Any, num_items: int) -> tuple[int, int]:
    """``(start, end)`` of a loader slice: ints with ``0 <= start < end <= num_items``."""
    start = check_int("start", start, minimum=None)
    end = check_int("end", end, minimum=None)
    if not 0 <= start < end <= num_items:
        raise ValueError(
            f"slice needs 0 <= start < end <= {num_items} (the loader's num_items), "
            f"got start={start}, end={end}"
        )
    return start, end
