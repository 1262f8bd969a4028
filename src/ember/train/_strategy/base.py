"""The training-strategy protocol and what every strategy is handed.

A strategy owns the epoch loop: where the model lives, how batches reach it, how gradients are
combined. ember ships :class:`~ember.train._strategy.single.SingleDevice`; a custom strategy is
any object with ``fit`` (see ``examples/``), passed to ``with_training_strategy``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ember.data import DataLoader
from ember.train._events import EndEpoch, EndSplit, StartSplit
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._metric.store import EventStore
from ember.train._processor import EventProcessor

if TYPE_CHECKING:
    from ember.train._checkpoint.training import TrainingCheckpointer
    from ember.train._early_stopping import EarlyStoppingStrategy

__all__ = [
    "EpochRunner",
    "FitResult",
    "SupervisedLearningStrategy",
    "TrainingComponents",
    "end_epoch",
    "resume",
    "run_epochs",
    "stop_reason",
]

log = logging.getLogger("ember.train")

EpochRunner = Callable[[int], None]
"""Runs one split of the given epoch (its batches and their events, not StartSplit/EndSplit)."""


@dataclass(frozen=True, slots=True)
class TrainingComponents:
    """Everything a strategy needs besides the learner and the loaders."""

    num_epochs: int
    interrupter: Interrupter
    processor: EventProcessor
    store: EventStore
    grads_accumulation: int | None = None
    early_stopping: EarlyStoppingStrategy | None = None
    checkpointer: TrainingCheckpointer | None = None
    gradient_checkpointing: tuple[str, ...] | None = None
    """Dotted names of the submodules to checkpoint (``checkpointed(...)``), or None: off."""

    @property
    def failed(self) -> bool:
        """True once the metrics thread has failed (its error ends the run)."""
        return getattr(self.processor, "error", None) is not None


@dataclass(frozen=True, slots=True)
class FitResult:
    """How a fit ended: the last epoch completed and, if it stopped early, why."""

    last_epoch: int
    stop_reason: str | None = None


@runtime_checkable
class SupervisedLearningStrategy(Protocol):
    """Runs epochs ``starting_epoch..num_epochs`` of training and validation."""

    def fit(
        self,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        """Train; the events of reference §3.3 go to ``components.processor``."""
        ...


def resume(
    components: TrainingComponents,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
    starting_epoch: int,
) -> None:
    """Restore the checkpoint of epoch ``starting_epoch - 1``, if the run resumes.

    Call it once the learner is on its device, with the loaders the strategy iterates.
    """
    if starting_epoch > 1:
        if components.checkpointer is None:
            raise ValueError(f"resuming at epoch {starting_epoch} needs checkpointers")
        components.checkpointer.restore(starting_epoch - 1, learner, loaders)


def end_epoch(
    components: TrainingComponents,
    epoch: int,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
) -> str | None:
    """After ``EndEpoch``: flush, checkpoint, then ask early stopping (reference §3.4).

    Returns the early-stopping reason when training should end. Nothing is checkpointed once
    the metrics thread has failed, so non-finite weights are never saved (B8).
    """
    checkpointer, early_stopping = components.checkpointer, components.early_stopping
    if checkpointer is None and early_stopping is None:
        return None
    components.processor.flush()
    if components.failed:
        return None
    if checkpointer is not None:
        checkpointer.checkpoint(epoch, learner, loaders, components.store)
    if early_stopping is not None and early_stopping.should_stop(epoch, components.store):
        return getattr(early_stopping, "reason", None) or f"early stopping after epoch {epoch}"
    return None


def stop_reason(components: TrainingComponents) -> str | None:
    """Why the interrupter stopped training, after keeping the last epoch boundary on disk.

    A stop in the middle of an epoch abandons that epoch; the checkpoint of the epoch before it
    is written even if the strategy had not kept it, so a resume reruns the abandoned epoch
    from its start and ends exactly as an uninterrupted run (B4, B7).
    """
    if not components.interrupter.should_stop():
        return None
    if components.checkpointer is not None and not components.failed:
        components.checkpointer.save_last()
    return components.interrupter.message or "interrupted"


def run_epochs(
    components: TrainingComponents,
    learner: Learner[Any],
    loaders: Mapping[str, DataLoader[Any]],
    starting_epoch: int,
    train_split: EpochRunner,
    valid_split: EpochRunner,
) -> FitResult:
    """The epoch loop shared by the strategies (reference §2.1, with ember's stop rules).

    ``loaders`` are the ``train`` and ``valid`` loaders the strategy iterates (their sizes go in
    the StartSplit events and their states into checkpoints). The strategy supplies how one
    split runs; everything around it — events, checkpoints, early stopping, stops — is here.
    """
    processor, interrupter = components.processor, components.interrupter
    train, valid = loaders["train"], loaders["valid"]
    last_epoch = starting_epoch - 1
    for epoch in range(starting_epoch, components.num_epochs + 1):
        processor.process_train(StartSplit(epoch, train.num_items()))
        train_split(epoch)
        processor.process_train(EndSplit(epoch))
        if interrupter.should_stop():
            break
        processor.process_valid(StartSplit(epoch, valid.num_items()))
        valid_split(epoch)
        processor.process_valid(EndSplit(epoch))
        processor.process_train(EndEpoch(epoch))
        last_epoch = epoch
        early = end_epoch(components, epoch, learner, loaders)
        if early is not None:
            return FitResult(last_epoch, early)
        if interrupter.should_stop():
            break
    reason = stop_reason(components)
    if reason is not None:
        processor.flush()  # the epoch lines, written by the metrics thread, come first
        log.info("Training interrupted: %s", reason)
    return FitResult(last_epoch, reason)
