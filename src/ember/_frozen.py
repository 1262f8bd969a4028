"""Frozen records built on every batch, at half the cost of the generated ``__init__``.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__``, looked
up anew for every field: about 0.2 µs a field, and one training batch builds eight such records
(its progress, step context, event, metric input, metadata and entries, the logged value):
several microseconds a step, a percent or more of a small model's. Those records write their
``__init__`` out with :data:`set_field` (``object.__setattr__``, bound once). They stay frozen
dataclasses: equality, ``repr``, ``dataclasses.replace`` and refused assignment are unchanged,
and ``tests/test_frozen.py`` checks every written-out signature against the fields.
"""

from __future__ import annotations

__all__ = ["set_field"]

set_field = object.__setattr__
"""Set a field of a frozen dataclass instance in its own ``__init__``."""
