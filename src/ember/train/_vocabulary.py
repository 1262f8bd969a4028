"""The words the training layer speaks in: which pass (``Split``), which way is better
(``Direction``), and 0.1.0's ``Aggregate`` (deprecated).

Every part of ``ember.train`` that names a split or compares metric values uses these, so they
live apart from the metrics, loggers and checkpoints that share them.
"""

from __future__ import annotations

import enum
import warnings
from typing import TypeVar

__all__ = ["Aggregate", "Direction", "Split", "as_vocabulary", "warn_aggregate"]

E = TypeVar("E", bound=enum.Enum)


class Split(enum.Enum):
    """A pass of an epoch, or an evaluation's test; the value is the directory name used on
    disk (``test`` holds one directory per test name, see ``docs/training.md``)."""

    TRAIN = "train"
    VALID = "valid"
    TEST = "test"

    # Members are singletons compared by identity, so identity hashing is exact; Enum's own
    # __hash__ is a Python call, and splits key several dict lookups per batch.
    __hash__ = object.__hash__


class Direction(enum.Enum):
    """Which way is better for a metric value."""

    LOWEST = "lowest"
    HIGHEST = "highest"


class Aggregate(enum.Enum):
    """Deprecated since 0.2.0 (Burn's one-member ``Aggregate``): an epoch's value is always the
    mean of its batches, so the argument is dropped; 0.1.0's calls that pass it still work."""

    MEAN = "mean"


def warn_aggregate(what: str) -> None:
    """Say once per call site that ``what`` was given 0.1.0's ``Aggregate`` argument."""
    warnings.warn(
        f"{what}: the Aggregate argument is deprecated since ember 0.2.0 and goes in 0.3.0 (an "
        "epoch's value is always the mean): drop it",
        DeprecationWarning,
        stacklevel=3,
    )


def as_vocabulary(kind: type[E], value: object, name: str) -> E:
    """``value`` as a member of ``kind``: a member, or its value as a string (``"valid"`` for
    ``Split.VALID``, ``"lowest"``); TypeError or ValueError naming ``name`` and the choices."""
    if isinstance(value, kind):
        return value
    choices = ", ".join(repr(member.value) for member in kind)
    if isinstance(value, str):
        try:
            return kind(value)
        except ValueError:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}") from None
    raise TypeError(
        f"{name} must be a {kind.__name__} or one of {choices}, got {value!r} "
        f"({type(value).__name__})"
    )
