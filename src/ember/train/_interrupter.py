"""A handle to stop training from anywhere: user code, a renderer, a signal, an error."""

from __future__ import annotations

import threading

__all__ = ["Interrupter"]


class Interrupter:
    """Thread-safe stop flag with a reason; the loop polls it after every batch.

    A stop during the training split ends the run at the next optimizer step (no validation),
    where a mid-round checkpoint (``checkpoint/step-N/``) is written when the run takes them, and
    a resume continues from it. A stop during validation finishes the epoch (checkpoint and
    early stopping included) and then ends the run; unlike Burn, no batch of the next epoch is
    trained.
    """

    def __init__(self) -> None:
        self._flag = threading.Event()
        self._lock = threading.Lock()
        self._message: str | None = None

    def stop(self, reason: str | None = None) -> None:
        """Ask training to stop; a given ``reason`` replaces the previous one."""
        with self._lock:
            if reason is not None:
                self._message = reason
            self._flag.set()

    def should_stop(self) -> bool:
        """True once :meth:`stop` was called (until :meth:`reset`)."""
        return self._flag.is_set()

    def reset(self) -> None:
        """Clear the flag; the message stays, as in Burn."""
        self._flag.clear()

    @property
    def message(self) -> str | None:
        """The last reason given to :meth:`stop`."""
        with self._lock:
            return self._message

    def __repr__(self) -> str:
        return f"Interrupter(stopped={self.should_stop()}, message={self.message!r})"
