"""Where a run is: every counter of the training loop, in one object.

The loop advances them, the optimizer window counts its steps in them, and a checkpoint keeps
them (its ``loop`` and ``round`` entries, ``_state/parts.py``), so a resumed run goes on
from exactly where the checkpoint left it. The code counts *rounds*: a round trains, validates
and does an epoch's bookkeeping (an epoch by default, or N steps or N epochs with
``validate_every``, ``_schedule.py``); events, hooks, log directories and checkpoint files keep
Burn's word for it, ``epoch``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunCounters"]


@dataclass(slots=True)
class RunCounters:
    """The counters of one run (see the module doc)."""

    last_round: int = 0
    """Rounds completed (what a run that fails now reports as its last epoch)."""
    optimizer_steps: int = 0
    """Optimizer steps taken, skipped ones included (the global step)."""
    skipped_steps: int = 0
    """Steps skipped for non-finite 16-mixed gradients."""
    passes: int = 0
    """Train passes completed."""
    pass_items: int = 0
    """Items of the train pass under way consumed so far."""
    round_items: int = 0
    """Train items logged in the round under way."""
    round_passes: int = 0
    """Train passes completed in the round under way."""

    @classmethod
    def starting(cls, starting_round: int) -> RunCounters:
        """The counters of a run that starts at ``starting_round`` (a resume restores the rest
        from its checkpoint)."""
        return cls(last_round=starting_round - 1, passes=starting_round - 1)
