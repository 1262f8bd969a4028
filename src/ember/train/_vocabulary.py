"""The words the training layer speaks in: which pass (``Split``), which way is better
(``Direction``).

Every part of ``ember.train`` that names a split or compares metric values uses these, so they
live apart from the metrics, loggers and checkpoints that share them.
"""

from __future__ import annotations

import enum

__all__ = ["Direction", "Split"]


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
