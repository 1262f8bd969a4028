"""Argument checks shared by datasets, loaders and the builder.

Every public constructor and builder method validates its arguments at the call, so a bad value
is reported where it was written, with the argument's name and the value, not deep inside an
iteration.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = ["check_int", "check_seed"]


def check_int(name: str, value: Any, *, minimum: int) -> int:
    """``value`` as an int, if it is an integer (not a bool) and ``>= minimum``.

    Raises TypeError (not an integer) or ValueError (too small), naming ``name`` and the value.
    """
    # bool is an int subclass, but True as a batch size or seed is always a mistake.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return int(value)


def check_seed(value: Any, name: str = "seed") -> int:
    """A shuffle seed: a non-negative int (numpy's SeedSequence takes no negative entropy)."""
    return check_int(name, value, minimum=0)
