"""The training loop's own state: its counters, what a checkpoint keeps of them, and how a
resumed run puts them back (``docs/design.md``, "Checkpoints").

A round-end checkpoint keeps the ``loop`` counters: optimizer steps, train passes completed,
items of the pass under way (a step round may end mid-pass), the last step's lr and the
gradient scaler. A mid-round checkpoint, taken at an optimizer step inside round ``e`` (the
accumulation window is empty there: a step just closed it), also keeps the partial ``round``:
the train items logged in it, its passes, whether its training is over (a stop at its last
step), every train metric's running state (``StatefulMetric``) and where each metric log ends
(``ResumableLogger``). A run resumed from it continues the round's train split where it was:
the same iteration numbers, metric values and log lines as a run that never stopped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ember._errors import CheckpointError
from ember.train._checkpoint.run_state import RestoredRun, loop_count
from ember.train._learner import Learner
from ember.train._metric.base import Metric
from ember.train._metric.resumable import has_metric_state
from ember.train._metric.store import EventStore
from ember.train._vocabulary import Split
from ember.train._window import OptimizerWindow

__all__ = ["LoopCounters", "restore_counters"]


@dataclass(slots=True)
class LoopCounters:
    """Where the loop is, besides the window's optimizer steps."""

    passes: int
    """Train passes completed."""
    consumed: int = 0
    """Items of the pass under way consumed so far."""
    iteration: int = 0
    """Train items logged in the round."""
    round_passes: int = 0
    """Train passes completed in the round."""
    round_trained: bool = False
    """The resumed round's training is over (it was stopped at its last step)."""
    resumed: bool = False
    """The next round goes on from a mid-round checkpoint (the counters above are its)."""

    def loop_state(
        self, window: OptimizerWindow, learner: Learner[Any], pass_open: bool
    ) -> dict[str, Any]:
        """The ``loop`` entry of a checkpoint."""
        state: dict[str, Any] = {
            "optimizer_steps": window.optimizer_steps,
            "train_passes": self.passes,
            "pass_items": self.consumed if pass_open else 0,
            "lr": learner.lr_current,
        }
        if window.scaler is not None:
            state["grad_scaler"] = window.scaler.state_dict()
        return state

    def round_state(
        self, trained: bool, metrics: Sequence[Metric], logs: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The ``round`` entry of a mid-round checkpoint (metric states may hold tensors)."""
        return {
            "iteration": self.iteration,
            "round_passes": self.round_passes,
            "trained": trained,
            "metrics": {metric.name: metric.state_dict() for metric in metrics},  # type: ignore[attr-defined]
            "logs": logs,
        }


def restore_counters(
    restored: RestoredRun,
    counters: LoopCounters,
    window: OptimizerWindow,
    learner: Learner[Any],
    where: str,
    epoch: int,
) -> None:
    """Put the loop's counters, lr and gradient scaler back from a checkpoint (``where``
    names it in errors); older checkpoints without a count resume at a round boundary."""
    loop = restored.loop
    window.optimizer_steps = loop_count(loop, "optimizer_steps", 0, where)
    counters.passes = loop_count(loop, "train_passes", epoch, where)
    counters.consumed = loop_count(loop, "pass_items", 0, where)
    lr = loop.get("lr")
    if lr is not None and (isinstance(lr, bool) or not isinstance(lr, int | float)):
        raise CheckpointError(f"{where} holds lr={lr!r}, not a number")
    learner.lr_current = None if lr is None else float(lr)
    scaler_state = loop.get("grad_scaler")
    if window.scaler is not None and isinstance(scaler_state, dict):
        window.scaler.load_state_dict(scaler_state)
    partial = restored.round
    if partial is None:
        return
    counters.iteration = loop_count(partial, "iteration", 0, where)
    counters.round_passes = loop_count(partial, "round_passes", 0, where)
    counters.round_trained = partial.get("trained") is True
    counters.resumed = True


def restore_round_logs_and_metrics(
    restored: RestoredRun, metrics: Sequence[Metric], store: EventStore, epoch: int, where: str
) -> None:
    """Give each train metric its saved running state and cut the train logs of ``epoch`` back
    to where the mid-round checkpoint left them (the main process)."""
    partial = restored.round
    if partial is None:
        return
    saved = partial.get("metrics")
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"{where} holds no metric states: {saved!r}")
    for metric in metrics:
        if metric.name not in saved or not has_metric_state(metric):
            raise CheckpointError(
                f"{where} holds no running state of the train metric {metric.name!r} (it has "
                f"{sorted(saved)}): the metrics changed since it was written; resume from a "
                "round end with checkpoint(epoch), or register the same train metrics"
            )
        try:
            metric.load_state_dict(saved[metric.name])  # type: ignore[attr-defined]
        except (ValueError, TypeError) as error:
            raise CheckpointError(f"{where}: {error}") from error
    logs = partial.get("logs", [])
    try:
        store.resume_split(Split.TRAIN, epoch, logs if isinstance(logs, list) else [])
    except (OSError, ValueError) as error:
        raise CheckpointError(f"{where}: {error}") from error
