"""Graceful stop on Ctrl-C / SIGTERM while ``launch`` runs ("graceful stop").

The first SIGINT or SIGTERM asks the interrupter to stop: the current step finishes, the last
epoch boundary is kept on disk, the logs are flushed and ``launch`` returns with the reason.
A second signal aborts at once (``KeyboardInterrupt`` for SIGINT, ``SystemExit(143)`` for
SIGTERM); logs are still flushed on the way out. The previous handlers come back when ``launch``
returns. Handlers can only be installed from the main thread; elsewhere nothing is changed.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ember.train._interrupter import Interrupter

__all__ = ["graceful_stop"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def graceful_stop(interrupter: Interrupter) -> Iterator[None]:
    """Route SIGINT and SIGTERM to ``interrupter`` for the duration of the block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if received:
            if signum == signal.SIGINT:
                raise KeyboardInterrupt(f"second {name}: training aborted")
            raise SystemExit(128 + signum)
        received.append(signum)
        interrupter.stop(f"received {name}: stopped after the current step")

    previous: dict[signal.Signals, Any] = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
