"""Argument checks shared by every public constructor and builder method.

Every public constructor and builder method validates its arguments at the call, so a bad value
is reported where it was written, with the argument's name, the value and what is expected,
not deep inside an iteration. Integers are any ``numbers.Integral`` but ``bool`` (numpy's
too); a float or a string where an integer belongs is refused, everywhere with the same words.
"""

from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any

__all__ = [
    "check_directory",
    "check_int",
    "check_optional_int",
    "check_positive_int",
    "check_real",
    "check_seed",
    "check_slice",
]


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


def check_optional_int(name: str, value: Any, *, minimum: int | None = None) -> int | None:
    """None, or ``value`` checked by :func:`check_int`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int or None, got {value!r} ({type(value).__name__})")
    return check_int(name, value, minimum=minimum)


def check_real(
    name: str,
    value: object,
    *,
    minimum: float,
    strict: bool = False,
    maximum: float | None = None,
    strict_maximum: bool = False,
) -> float:
    """``value`` as a finite float within bounds (``strict``: ``> minimum``; ``strict_maximum``:
    ``< maximum``), or TypeError/ValueError naming ``name`` and the value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if strict and not number > minimum:
        raise ValueError(f"{name} must be > {minimum:g}, got {value!r}")
    if not number >= minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {value!r}")
    if maximum is not None and (number >= maximum if strict_maximum else number > maximum):
        raise ValueError(
            f"{name} must be {'<' if strict_maximum else '<='} {maximum:g}, got {value!r}"
        )
    return number


def check_directory(value: Any, what: str) -> Path:
    """``value`` (a str or a path) as a Path that is a directory or does not exist yet; TypeError
    or ValueError naming ``what`` (``"the run directory"``) and the value otherwise."""
    if not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"directory must be a str or a path ({what}), got {value!r} ({type(value).__name__})"
        )
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise ValueError(f"directory is a file, not a directory: {str(path)!r}")
    return path


def check_positive_int(name: str, value: Any) -> int:
    """``value`` as an int >= 1 (see :func:`check_int`)."""
    return check_int(name, value, minimum=1)


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
