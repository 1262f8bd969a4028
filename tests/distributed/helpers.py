"""What the tests of ember.distributed run in their processes (importable by them)."""

from __future__ import annotations

import threading


def block() -> None:
    """Wait for ever (until the process is stopped), as a rank that stopped making progress."""
    threading.Event().wait()
