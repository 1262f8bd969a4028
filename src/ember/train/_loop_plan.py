"""What the training loop runs (``LoopPlan``), how it ended (``LoopResult``), and the facts
every process of a run must agree on before the first collective."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ember.data import DataLoader
from ember.train._checkpoint.run import MidRoundCheckpointer, RunCheckpointer
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._hooks import Stateful, TrainingHooks
from ember.train._metric.base import Metric
from ember.train._metric.resumable import has_metric_state
from ember.train._precision import Precision
from ember.train._schedule import Schedule
from ember.train._strategy.base import pass_size
from ember.train._window import Clipping

__all__ = ["LoopPlan", "LoopResult", "mid_round_blocker", "same_training_facts"]


@dataclass(frozen=True, slots=True)
class LoopPlan:
    """What the loop runs: the epochs, the accumulation and the optional parts."""

    num_epochs: int
    starting_epoch: int = 1
    grads_accumulation: int | None = None
    gradient_checkpointing: tuple[str, ...] | None = None
    """Dotted names of the submodules to checkpoint, or None: off."""
    early_stopping: EarlyStoppingStrategy | None = None
    checkpointer: RunCheckpointer | None = None
    precision: Precision = "32"
    clipping: Clipping | None = None
    mean_accumulation: bool = False
    measure_grad_norm: bool = False
    hooks: tuple[TrainingHooks, ...] = ()
    stateful: Mapping[str, Stateful] = field(default_factory=dict)
    """User state that joins every checkpoint, by name (``with_stateful``)."""
    validate: bool = True
    """False: train only (no valid loader): no valid split, an epoch ends after training."""
    schedule: Schedule | None = None
    """Rounds, ``max_steps`` and intervals (``_schedule.py``); None: ``num_epochs`` epochs."""
    resume_step: int | None = None
    """Resume from the mid-round checkpoint at this optimizer step of ``starting_epoch``
    (None: from the end of round ``starting_epoch - 1``, or afresh)."""
    train_metrics: Sequence[Metric] = ()
    """The metrics the main process updates on the train split: a mid-round checkpoint holds
    their running states."""
    mid_round_blocker: str | None = "there are no checkpointers"
    """Why no mid-round checkpoint can be taken (``mid_round_blocker``), or None: they can."""


@dataclass(frozen=True, slots=True)
class LoopResult:
    """How the loop ended: the last epoch completed and, if it stopped early, why; ``complete``:
    the run is over (``num_epochs`` reached, or early stopping), not interrupted."""

    last_epoch: int
    stop_reason: str | None = None
    complete: bool = False


def mid_round_blocker(
    checkpointer: RunCheckpointer | None, train_metrics: Sequence[Metric]
) -> str | None:
    """Why this run cannot take mid-round checkpoints, or None: its checkpointer takes them and
    every train metric saves its running state (``StatefulMetric``)."""
    if checkpointer is None:
        return "there are no checkpointers"
    if not isinstance(checkpointer, MidRoundCheckpointer):
        return (
            f"the checkpointer {checkpointer!r} takes no mid-round checkpoints (it has no "
            "checkpoint_mid_round, restore_mid_round and latest_complete_point)"
        )
    for metric in train_metrics:
        if not has_metric_state(metric):
            return (
                f"the train metric {metric.name!r} ({type(metric).__name__}) cannot save its "
                "running state: give it state_dict() and load_state_dict() (docs/training.md, "
                '"Mid-round checkpoints"), or register it for the valid split only'
            )
    return None


def same_training_facts(
    plan: LoopPlan, loaders: Mapping[str, DataLoader[Any]], schedule: Schedule
) -> dict[str, int]:
    """What every process must share, by the name a disagreement is reported under."""
    train_items, train_batches = pass_size(loaders["train"])
    valid_items, valid_batches = pass_size(loaders["valid"]) if "valid" in loaders else (0, 0)
    return {
        "the starting epoch (is the checkpoint directory visible to every rank?)": (
            plan.starting_epoch
        ),
        "the step resumed from (0: a round end)": plan.resume_step or 0,
        "num_epochs": plan.num_epochs,
        "max_steps": schedule.max_steps or 0,
        "grads_accumulation": plan.grads_accumulation or 0,
        "the train loader's items": train_items,
        "the train loader's batches": train_batches,
        "the valid loader's items": valid_items,
        "the valid loader's batches": valid_batches,
        "checkpointers": int(plan.checkpointer is not None),
        "early stopping": int(plan.early_stopping is not None),
    }
