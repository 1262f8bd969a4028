"""``SupervisedTraining.max_time(seconds)``: a wall-clock budget for training, as a callback.

:class:`TimeLimit` is written on the public extension point alone (``Callback`` and
``RunView``): its clock starts when the run does (``on_run_start``), and after each optimizer
step (and each round's end) whose time is past the budget it stops the run, which ends there as
every stop does: the window under way is complete, a mid-round checkpoint is taken when the run
takes them, ``result.stop_reason`` says the budget ran out, and ``resume_latest()`` goes on from
there. The budget counts this launch's time: a resumed launch gets it anew, so a job with a
time limit gives ``max_time`` its limit less a margin and requeues itself (the run continues
exactly). Under a data-parallel strategy each process reads its own clock; the lowest rank to
run out stops every process at the same step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from ember._checks import check_real
from ember.train._callbacks.base import Callback, RunView

__all__ = ["TimeLimit", "format_seconds"]


def format_seconds(seconds: float) -> str:
    """``seconds`` as ``1h02m03s``, ``2m03s`` or ``3.5s``."""
    if seconds < 60:
        return f"{seconds:.3g}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


class TimeLimit(Callback):
    """Stops the run after the first optimizer step (or round end) past ``seconds`` of
    training (see the module doc); ``clock`` is ``time.monotonic`` unless given."""

    def __init__(self, seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.seconds = check_real("max_time", seconds, minimum=0.0, strict=True)
        self._clock = clock
        self._deadline = math.inf
        self._run: RunView | None = None

    def on_run_start(self, run: RunView) -> None:
        self._run = run
        self._deadline = self._clock() + self.seconds

    def on_after_optimizer_step(self, step: RunView) -> None:
        if self._clock() >= self._deadline:
            step.stop(self._reason(f"after step {step.optimizer_steps}"))

    def on_epoch_end(self, epoch: int) -> None:
        if self._run is not None and self._clock() >= self._deadline:
            self._run.stop(self._reason(f"after epoch {epoch}"))

    def _reason(self, where: str) -> str:
        return f"max_time: the time budget of {format_seconds(self.seconds)} ran out ({where})"

    def __repr__(self) -> str:
        return f"TimeLimit({self.seconds!r})"
