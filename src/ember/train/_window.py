"""The optimizer window: which batches share one optimizer step, and that step.

With ``grads_accumulation(n)`` a window is n consecutive training batches of an epoch (the last
window of an epoch that ends naturally may be shorter); without it, every batch is a window of
one. Every strategy's batches go through one :class:`OptimizerWindow`, so the accumulation rule
is written once::

    context = window.context(epoch, iteration, batch)   # before the batch's train_step
        accumulating = not the window's first batch     # backward adds to the .grad slots
    window.closes(progress)                              # True at the window's last batch:
                                                         # n batches, or the split's end
    window.step(learner)                                 # once the window's gradients are in
        lr_step()                                        # the main model's .grad slots
        optimizer_step(gradients in the .grad slots)     # through the model's optimize()

Gradients are summed over the window's batches (the seed's rule: like one n times larger batch
trained with an n times larger learning rate). The window is also where gradient clipping and
loss scaling sit, once per optimizer step, on the gradients of the whole window.
"""

from __future__ import annotations

from typing import Any

from ember.data import Progress
from ember.train._learner import Learner
from ember.train._step import GradientsParams, StepContext

__all__ = ["OptimizerWindow"]


class OptimizerWindow:
    """Groups training batches into optimizer steps; counts the steps taken."""

    __slots__ = ("_filled", "optimizer_steps", "size")

    def __init__(self, size: int | None, optimizer_steps: int = 0) -> None:
        self.size = size or 1
        self.optimizer_steps = optimizer_steps
        self._filled = 0

    def context(self, epoch: int, iteration: int, batch: Any) -> StepContext:
        """The step context of the window's next batch (see :class:`StepContext`)."""
        return StepContext(epoch, iteration, self.optimizer_steps, batch, self._filled > 0)

    def closes(self, progress: Progress) -> bool:
        """Count the batch in; True when it is the window's last (full, or the split ended)."""
        self._filled += 1
        return self._filled == self.size or progress.is_completed

    def step(self, learner: Learner[Any]) -> None:
        """One optimizer step with the gradients in the learner's model's ``.grad`` slots."""
        learner.lr_step()
        learner.optimizer_step(GradientsParams.from_module(learner.model))
        self.optimizer_steps += 1
        self._filled = 0

    def drop(self) -> None:
        """Forget a partial window (an interrupted split): its gradients are never applied."""
        self._filled = 0
