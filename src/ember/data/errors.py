"""The data layer's own error.

Bad arguments raise the built-in ``ValueError``/``TypeError`` at the call that receives them, and
an exception raised by a dataset or a batcher reaches the consumer as itself (never wrapped), so
only misuse of a loader's lifecycle and unsupported operations need a type of their own::

    Exception
    └── DataLoaderError   a closed loader was iterated, or a loader cannot do what was asked
"""

from __future__ import annotations

__all__ = ["DataLoaderError"]


class DataLoaderError(Exception):
    """A loader was used in a way it cannot support (iterated after ``close()``, an unsupported
    ``slice``); the message says what and why."""
