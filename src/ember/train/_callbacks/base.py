"""User code at every point of the loop: :class:`Callback`, and the run a callback sees.

A callback is any object with some of the methods of :class:`Callback` (subclass it and
override what you need: every method does nothing, as Keras' ``Callback``), registered with
``SupervisedTraining.with_callbacks(*callbacks)``. The loop calls each method a callback has
on the training thread, on every process of the run, callbacks in the order they were given,
at these points (the loop's order)::

    on_run_start(run)                    the model placed, the optimizers built, a resumed
                                         run's state restored; before the first round
    for each round ("epoch"):
        on_epoch_start(epoch)
        on_split_start(Split.TRAIN, epoch)
        for each train batch:
            on_train_batch_start(step)          before its forward pass
            when it closes its optimizer window (every batch without accumulation):
                on_before_optimizer_step(step)  the window's gradients in the .grad slots
                                                (unscaled under 16-mixed), before clipping
                on_after_optimizer_step(step)   after the step (step.optimizer_steps counts it)
            on_train_batch_end(step)
            [on_checkpoint_saved(epoch, step)]  a mid-round checkpoint (checkpoint_every)
        on_split_end(Split.TRAIN, epoch)
        on_split_start(Split.VALID, epoch)      (a run that validates)
        on_split_end(Split.VALID, epoch)
        on_validation_end(epoch, values)        the valid metrics' epoch values
        on_epoch_end(epoch)                     before the round's checkpoint
        [on_checkpoint_saved(epoch, None)]      the round's checkpoint
    on_run_end(run)                      training ended: its schedule, a stop, early stopping
    on_error(error)                      training failed (instead of on_run_end)

The per-step points and the run's start and end get a :class:`RunView`: the model, the
optimizer and the counters of the run, and ``stop``/``log``. A callback with ``state_dict()``
and ``load_state_dict()`` joins every checkpoint and is restored before the first step of a
resumed run (before ``on_run_start``), so a resumed run stays bit-identical. An exception a
callback raises is the run's error, with a note naming the callback and the point. A run
without callbacks calls nothing per step.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._learner import Learner

__all__ = ["CALLBACK_POINTS", "PER_STEP_POINTS", "Callback", "RunView", "StopRequest"]

CALLBACK_POINTS = (
    "on_run_start",
    "on_epoch_start",
    "on_split_start",
    "on_train_batch_start",
    "on_before_optimizer_step",
    "on_after_optimizer_step",
    "on_train_batch_end",
    "on_split_end",
    "on_validation_end",
    "on_epoch_end",
    "on_checkpoint_saved",
    "on_run_end",
    "on_error",
)
"""Every point of the loop a callback can have a method for, in the loop's order."""

PER_STEP_POINTS = (
    "on_train_batch_start",
    "on_before_optimizer_step",
    "on_after_optimizer_step",
    "on_train_batch_end",
)
"""The points called at every train batch (a run without them pays nothing per step)."""


class Callback:
    """User code at the loop's points: every method does nothing; override the ones you need.

    See the module doc for the order. Any object with some of these methods is a callback
    too."""

    def on_run_start(self, run: RunView) -> None:
        """Training is about to start (or go on, for a resumed run)."""

    def on_epoch_start(self, epoch: int) -> None:
        """Round ``epoch`` begins."""

    def on_split_start(self, split: Split, epoch: int) -> None:
        """The ``split`` pass of ``epoch`` begins (after its StartSplit event)."""

    def on_train_batch_start(self, step: RunView) -> None:
        """A train batch is about to run its forward and backward pass."""

    def on_before_optimizer_step(self, step: RunView) -> None:
        """The optimizer window's gradients are in the ``.grad`` slots (unscaled under
        16-mixed); clipping and the optimizer step follow."""

    def on_after_optimizer_step(self, step: RunView) -> None:
        """The optimizer stepped (``step.optimizer_steps`` counts this one; a 16-mixed step
        skipped for non-finite gradients counts too)."""

    def on_train_batch_end(self, step: RunView) -> None:
        """A train batch ran (and, when it closed its window, the optimizer step)."""

    def on_split_end(self, split: Split, epoch: int) -> None:
        """The ``split`` pass of ``epoch`` ended (after its EndSplit event)."""

    def on_validation_end(self, epoch: int, values: Mapping[str, float]) -> None:
        """Validation of ``epoch`` ended: ``values`` maps each valid numeric metric's name to
        its epoch value (what its log's ``final`` line holds)."""

    def on_epoch_end(self, epoch: int) -> None:
        """Round ``epoch`` is complete (after EndEpoch, before its checkpoint)."""

    def on_checkpoint_saved(self, epoch: int, step: int | None) -> None:
        """A checkpoint of round ``epoch`` was taken: at optimizer step ``step`` inside the
        round, or at its end (None). Its files are written on the checkpoint thread."""

    def on_run_end(self, run: RunView) -> None:
        """Training ended without an error (its schedule, a stop or early stopping)."""

    def on_error(self, error: BaseException) -> None:
        """Training failed with ``error`` (the run is finished after this)."""


class StopRequest:
    """A stop asked by a callback (``RunView.stop``): the first reason asked, kept until the
    loop takes it."""

    __slots__ = ("reason",)

    def __init__(self) -> None:
        self.reason: str | None = None

    def ask(self, reason: str) -> None:
        """Ask the run to stop; the first reason wins."""
        if self.reason is None:
            self.reason = reason

    def take(self) -> str | None:
        """The reason asked (None: no stop), forgotten once taken."""
        reason, self.reason = self.reason, None
        return reason


class RunView:
    """The run as a callback sees it: read it, never change the loop's state through it.

    ``model`` is the user's model (the same object the Learner trains: not a data-parallel
    wrapper), ``optimizer``/``optimizers`` its optimizers, ``learner`` the Learner. The
    counters are read when asked: ``epoch`` the round under way, ``iteration`` the train
    batch's (1-based in the round; 0 outside a train batch), ``optimizer_steps`` the steps
    taken (1 after the first). ``loss`` is the train batch's loss tensor (None outside one):
    reading its value (``.item()``) waits for the device, the callback's own host sync.
    ``stop(reason)`` ends the run after this step, the same way in every run;
    ``log(name, value)`` hands a value to the metrics with this batch (a ``ValueMetric``).
    """

    __slots__ = (
        "_counters",
        "_epoch",
        "_learner",
        "_loaders",
        "_main",
        "_rank",
        "_stop",
        "_unit",
        "directory",
    )

    def __init__(
        self,
        learner: Learner[Any],
        counters: Any,
        *,
        loaders: Mapping[str, Any],
        directory: Path,
        main: bool,
        rank: int,
        stop: StopRequest,
    ) -> None:
        self._learner, self._counters, self._loaders = learner, counters, loaders
        self._main, self._rank, self._stop = main, rank, stop
        self.directory = directory
        """The run directory."""
        self._unit: Any = None  # the train batch under way: (context, outputs), or None
        self._epoch = 0  # the loop's round, set as rounds start

    @property
    def learner(self) -> Learner[Any]:
        """The Learner: the model, its optimizers and its scheduler."""
        return self._learner

    @property
    def model(self) -> nn.Module:
        """The model being trained (the user's module, not a wrapper)."""
        model: nn.Module = self._learner.model
        return model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer (``optimizers`` for a Learner with several)."""
        return self._learner.optimizer

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimizer by name."""
        return self._learner.optimizers

    @property
    def train_loader(self) -> Any:
        """The run's train loader as placed (this process's share under a data-parallel
        strategy). Iterating it starts a pass of the run's own loader: do it once training is
        over (``on_run_end``), never during it, or the run's batches change."""
        return self._loaders["train"]

    @property
    def is_main_process(self) -> bool:
        """Whether this process writes the run's files (the only one, or rank 0)."""
        return self._main

    @property
    def rank(self) -> int:
        """This process's index among the run's processes (0 in a single process)."""
        return self._rank

    @property
    def epoch(self) -> int:
        """The round under way (before the first: the last one completed, 0 for a fresh run)."""
        return self._epoch

    @property
    def iteration(self) -> int:
        """The train batch's iteration in its round (1-based), 0 outside a train batch."""
        unit = self._unit
        return 0 if unit is None else int(unit[0].iteration)

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps taken so far (1 after the first)."""
        return int(self._counters.optimizer_steps)

    @property
    def batch(self) -> Any:
        """The train batch under way (None outside one)."""
        unit = self._unit
        return None if unit is None else unit[0].batch

    @property
    def loss(self) -> torch.Tensor | None:
        """The train batch's loss, detached (several devices in one process: their mean, on
        the main one); None outside a train batch or before its forward pass."""
        unit = self._unit
        if unit is None or unit[1] is None:
            return None
        losses: list[torch.Tensor] = [o.loss for o in unit[1] if o.loss is not None]
        if not losses:
            return None
        if len(losses) == 1:
            return losses[0].detach()
        device = losses[0].device
        return torch.stack([loss.detach().to(device) for loss in losses]).mean()

    def stop(self, reason: str) -> None:
        """End the run after this step (the optimizer window under way is completed; a
        mid-round checkpoint is taken there when the run takes them); outside a train batch,
        before the next round. ``result.stop_reason`` is ``reason``."""
        if not isinstance(reason, str) or not reason:
            raise TypeError(f"stop needs a reason (a non-empty str), got {reason!r}")
        self._stop.ask(reason)

    def log(self, name: str, value: torch.Tensor | float) -> None:
        """Log ``value`` as ``name`` with this train batch (register a ``ValueMetric(name)``);
        a one-element tensor is read on the metrics thread, not here."""
        unit = self._unit
        if unit is None:
            raise RuntimeError(
                f"log({name!r}, ...) logs with a train batch: call it from a per-step point "
                "(on_train_batch_start/end, on_before/after_optimizer_step)"
            )
        unit[0].log(name, value)

    def __repr__(self) -> str:
        return (
            f"RunView(epoch={self.epoch}, iteration={self.iteration}, "
            f"optimizer_steps={self.optimizer_steps}, rank={self._rank})"
        )
