"""Durations and intervals: how long a run trains, when it validates and when it checkpoints.

A run is a sequence of *rounds*; each round trains, then validates on the full valid loader,
then does the bookkeeping an epoch does (checkpoint, early stopping, a metric-driven scheduler).
By default a round is one epoch, exactly as before. ``validate_every(steps=N)`` makes a round N
optimizer steps, crossing the train loader's passes (a pass's last accumulation window may be
short, as in any epoch); ``validate_every(epochs=N)`` makes it N passes. The run ends at the end
of the round in which ``max_steps`` optimizer steps are taken or the train loader completes
``num_epochs`` passes, whichever comes first. Everything counted "per epoch" in an epoch run
(log directories, checkpoints, early-stopping patience, a per-epoch scheduler) counts rounds,
that is validations, in a step run (``docs/training.md``, "Step-granular training").

``checkpoint_every(steps=N)`` checkpoints at every multiple of N optimizer steps, and
``checkpoint_every(seconds=T)`` at the first optimizer step T seconds or more after the last
checkpoint: at the round's end (after its validation) when the step ends a round, else inside
the round (a mid-round checkpoint, ``_checkpoint/mid_round.py``). ``checkpoint_every(epochs=N)``
checkpoints the first round end at or after each multiple of N train passes. The run's last
round is always checkpointed (without ``checkpoint_every``: every round, as before).
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from typing import Any, Literal

from ember._checks import check_positive_int, check_real
from ember.data import DataLoader

__all__ = [
    "EVERY_EPOCH",
    "Every",
    "RoundMarks",
    "Schedule",
    "Unit",
    "check_schedule",
    "every",
    "steps_per_pass",
]

Unit = Literal["steps", "seconds", "epochs"]


@dataclass(frozen=True, slots=True)
class Every:
    """An interval: every ``value`` optimizer steps, seconds or train loader passes."""

    unit: Unit
    value: float

    def __str__(self) -> str:
        number = f"{self.value:g}"
        return f"{self.unit}={number}"


def every(method: str, units: tuple[Unit, ...], **given: Any) -> Every:
    """The one interval among ``given`` (keyword per unit, None: not given) of builder
    ``method``; TypeError/ValueError naming the method and the value otherwise."""
    chosen = [(unit, value) for unit, value in given.items() if value is not None]
    spelled = " | ".join(f"{unit}=N" for unit in units)
    if len(chosen) != 1:
        what = "none" if not chosen else " and ".join(f"{u}={v!r}" for u, v in chosen)
        raise TypeError(f"{method}() takes exactly one of {spelled}, got {what}")
    ((unit, value),) = chosen
    name = f"{method}({unit}=...)"
    if unit == "seconds":
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number of seconds, got {value!r}")
        return Every("seconds", check_real(name, value, minimum=0.0, strict=True))
    return Every(unit, check_positive_int(name, value))  # type: ignore[arg-type]


EVERY_EPOCH = Every("epochs", 1)
"""The default validation interval: every epoch."""


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a run ends, validates and checkpoints (see the module doc)."""

    max_epochs: int | None = 1
    """Train loader passes that end the run; None: only ``max_steps`` bounds it."""
    max_steps: int | None = None
    validate: Every = EVERY_EPOCH
    checkpoint: Every | None = None

    @property
    def by_steps(self) -> bool:
        """Whether a round is a number of optimizer steps (not of passes)."""
        return self.validate.unit == "steps"

    def rounds(self, steps_per_pass: int | None) -> int:
        """The number of rounds the run will have, for the renderer's progress (an estimate
        when a pass's length is unknown: a streaming loader)."""
        size = self.validate.value
        if self.by_steps:
            steps = self.max_steps
            if self.max_epochs is not None and steps_per_pass is not None:
                total = self.max_epochs * steps_per_pass
                steps = total if steps is None else min(steps, total)
            return max(1, math.ceil(steps / size)) if steps is not None else self.max_epochs or 1
        passes = self.max_epochs
        if self.max_steps is not None and steps_per_pass:
            needed = math.ceil(self.max_steps / steps_per_pass)
            passes = needed if passes is None else min(passes, needed)
        return max(1, math.ceil(passes / size)) if passes is not None else 1

    def checkpoints_mid_round(self, steps_per_pass: int | None) -> bool:
        """Whether ``checkpoint_every`` can fall inside a round: seconds, or a step interval
        that is not a whole number of rounds (of a known length)."""
        interval = self.checkpoint
        if interval is None or interval.unit == "epochs":
            return False
        if interval.unit == "seconds":
            return True
        if self.by_steps:
            round_steps: int | None = int(self.validate.value)
        else:
            round_steps = (
                None if steps_per_pass is None else steps_per_pass * int(self.validate.value)
            )
        return round_steps is None or int(interval.value) % round_steps != 0

    def total_steps(self, steps_per_pass: int | None) -> int | None:
        """The optimizer steps the run will have when ``max_steps`` bounds it (fewer when its
        epochs end it first), for the renderer's progress; None when it does not."""
        if self.max_steps is None:
            return None
        if self.max_epochs is not None and steps_per_pass is not None:
            return min(self.max_steps, self.max_epochs * steps_per_pass)
        return self.max_steps

    def round_ends(
        self, steps: int, passes: int, round_passes: int, *, stepped: bool, pass_ended: bool
    ) -> bool:
        """Whether the round ends after a unit that left ``steps`` optimizer steps taken (one
        by this unit when ``stepped``) and ``passes`` train passes completed (``round_passes``
        of them in this round)."""
        if self.ran_out(steps, passes):
            return True
        if self.by_steps:
            return stepped and steps % int(self.validate.value) == 0
        return pass_ended and round_passes >= self.validate.value

    def ran_out(self, steps: int, passes: int) -> bool:
        """Whether the run is over: ``max_steps`` steps taken or ``max_epochs`` passes done."""
        return (self.max_steps is not None and steps >= self.max_steps) or (
            self.max_epochs is not None and passes >= self.max_epochs
        )


@dataclass(slots=True)
class RoundMarks:
    """Where the last checkpoint (of either kind) was taken: steps, passes and the clock, to tell
    when the next one is due under ``checkpoint_every``."""

    steps: int
    passes: int
    time: float

    def due(self, interval: Every | None, steps: int, passes: int, now: float) -> bool:
        """Whether a checkpoint is due here, at a round end or after an optimizer step inside a
        round (not counting the run's last round)."""
        if interval is None:
            return True
        if interval.unit == "seconds":
            return now - self.time >= interval.value
        size = int(interval.value)
        if interval.unit == "steps":
            return steps // size > self.steps // size
        return passes // size > self.passes // size

    def take(self, schedule: Schedule, steps: int, passes: int) -> bool:
        """Whether this round end is checkpointed: as ``schedule.checkpoint`` says, and always
        the run's last round; the marks move here when it is."""
        now = time.monotonic()
        due = schedule.ran_out(steps, passes) or self.due(schedule.checkpoint, steps, passes, now)
        if due:
            self.steps, self.passes, self.time = steps, passes, now
        return due


def steps_per_pass(loader: DataLoader[Any], accumulation: int | None) -> int | None:
    """Optimizer steps in one pass of ``loader``, None when its length is unknown (a stream)."""
    if loader.num_items() is None:
        return None
    return math.ceil(len(loader) / (accumulation or 1))


def check_schedule(
    schedule: Schedule,
    valid: DataLoader[Any] | None,
    checkpointing: bool,
    mid_round_blocker: str | None = None,
    steps_per_pass: int | None = None,
) -> None:
    """Refuse at launch what the schedule cannot do: step validation without a valid loader or
    over an empty one, a checkpoint interval without checkpointers, or one that falls inside
    rounds when no mid-round checkpoint can be taken (``mid_round_blocker`` says why)."""
    if schedule.by_steps and valid is None:
        raise ValueError(
            f"validate_every({schedule.validate}) validates over the valid loader, and this run "
            "trains only: give SupervisedTraining(directory, train, valid) a valid loader, or "
            "drop validate_every"
        )
    if schedule.by_steps and valid is not None and valid.num_items() == 0:
        raise ValueError(
            f"validate_every({schedule.validate}) validates over the valid loader, which has no "
            "items: give SupervisedTraining a valid loader with items, or validate every epoch "
            "(the default)"
        )
    if schedule.checkpoint is not None and not checkpointing:
        raise ValueError(
            f"checkpoint_every({schedule.checkpoint}) needs checkpointers: call "
            "with_default_checkpointers() (or with_checkpointers(...)) too, or drop "
            "checkpoint_every"
        )
    if checkpointing and mid_round_blocker and schedule.checkpoints_mid_round(steps_per_pass):
        raise ValueError(
            f"checkpoint_every({schedule.checkpoint}) checkpoints inside rounds, and a "
            f"checkpoint there holds every train metric's running state, but {mid_round_blocker}; "
            "or checkpoint at round ends only: checkpoint_every(epochs=N), or a step interval "
            "that is a multiple of validate_every(steps=...)"
        )
