"""Stopping on Ctrl-C, and on a scheduler's SIGTERM or SIGUSR1, while ``launch`` runs.

The handlers cover the whole of ``launch``, its set-up and its finishing included, so that a
signal never ends the process half-way through its run directory (a survivor that torchrun or
``spawn`` stops while it writes its error to ``experiment.log``):

- **Ctrl-C (SIGINT)**: the first asks the interrupter to stop: the current step finishes, a
  step checkpoint is written there (with checkpointers), the logs are flushed and ``launch``
  returns with the reason. A second aborts at once (``KeyboardInterrupt``); logs are still
  flushed on the way out.
- **SIGTERM, SIGUSR1 (preemption)**: a scheduler taking the machine back (SLURM sends SIGUSR1
  ahead of the time limit with ``--signal=USR1@SECONDS``, then SIGTERM; torchrun passes SIGTERM
  on to its workers; Kubernetes sends SIGTERM). The first stops as Ctrl-C does, on every rank
  at the same step (the stop is agreed), which writes the step checkpoint; once the run
  directory is finished (logs flushed, the lock released) ``launch`` ends the process with
  exit code :data:`REQUEUE_EXIT_CODE` (75, ``EX_TEMPFAIL``: try again), which a job script
  reads as "requeue me": a resume continues exactly. Later ones change nothing: a worker of
  torchrun under SLURM receives SIGTERM twice (from the scheduler, then from the agent), and
  the second must not abort the checkpoint the first asked for. A training that failed ends as
  it would have (``TrainingError``), whatever the signal.

The previous handlers come back when ``launch`` ends. Handlers can only be installed from the
main thread; elsewhere nothing is changed.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from ember._errors import REQUEUE_EXIT_CODE
from ember.train._interrupter import Interrupter

__all__ = ["Signals", "graceful_stop"]

_PREEMPTION = tuple(
    getattr(signal, name) for name in ("SIGTERM", "SIGUSR1") if hasattr(signal, name)
)
_SIGNALS = (signal.SIGINT, *_PREEMPTION)


class Signals:
    """What the signals of one ``launch`` asked for (see the module doc)."""

    def __init__(self, interrupter: Interrupter) -> None:
        self._interrupter = interrupter
        self.received: list[signal.Signals] = []

    def handle(self, signum: int, frame: FrameType | None) -> None:
        """The handler of every signal of :data:`_SIGNALS`."""
        received = signal.Signals(signum)
        if self.received and received == signal.SIGINT:
            raise KeyboardInterrupt(f"second {received.name}: training aborted")
        self.received.append(received)
        if len(self.received) == 1:
            self._interrupter.stop(f"received {received.name}: stopped after the current step")

    @property
    def preempted(self) -> bool:
        """Whether a preemption signal (SIGTERM, SIGUSR1) was received."""
        return any(received in _PREEMPTION for received in self.received)

    def requeue_if_preempted(self, *, failed: bool) -> None:
        """End the process with :data:`REQUEUE_EXIT_CODE`, saying why on stderr, when a
        preemption signal arrived during a launch whose training did not fail; call it once
        the run directory is finished."""
        if self.preempted and not failed:
            name = next(r.name for r in self.received if r in _PREEMPTION)
            sys.stderr.write(
                f"ember: received {name}: training stopped after a step (checkpointed there when "
                f"the run has checkpointers); exit code {REQUEUE_EXIT_CODE} asks for a requeue "
                "(resume_latest() continues it exactly)\n"
            )
            raise SystemExit(REQUEUE_EXIT_CODE)


@contextmanager
def graceful_stop(interrupter: Interrupter) -> Iterator[Signals]:
    """Route SIGINT, SIGTERM and SIGUSR1 to ``interrupter`` for the block (see the module
    doc); yields what they asked for."""
    signals = Signals(interrupter)
    if threading.current_thread() is not threading.main_thread():
        yield signals
        return
    previous: dict[signal.Signals, Any] = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:
        signal.signal(sig, signals.handle)
    try:
        yield signals
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
