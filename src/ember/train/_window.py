"""The optimizer window: which batches share one optimizer step, and that step.

With ``grads_accumulation(n)`` a window is n consecutive training batches of an epoch (the last
window of an epoch that ends naturally may be shorter); without it, every batch is a window of
one. Every strategy's batches go through one :class:`OptimizerWindow`, so the rules are written
once::

    context = window.context(epoch, iteration, unit, items, progress)   # before train_step
        accumulating = not the window's first unit               # backward adds to .grad
        closing      = the window's last unit                    # DDP all-reduces only then
        loss_factor  = items / (n x the window's first items)    # mean=True only
    window.closes(progress)          # True at the window's last unit: n, or the split's end
    window.step(learner, closure)    # the window's gradients are in the main model's .grad
        lr_step()
        unscale (16-mixed)           # the gradient scaler's unscale_
        x nominal / real items       # mean=True and a window of other than n x first items
        before()                     # the callbacks' on_before_optimizer_step, if any
        norm = total gradient norm   # when clipping by norm, a GradNormMetric or a scaler
        clip by norm or by value
        if the scaler saw inf/NaN: skip the step (the scale is lowered)
        else optimizer_step(...)     # through the model's optimize(); a closure optimizer
                                     # (LBFGS) gets the unit's loss function (UnitClosure)
        scaler.update()

``mean=False`` (the seed's rule) sums the gradients of the window's batches: like one n times
larger batch trained with an n times larger learning rate. ``mean=True`` weights each batch by
its number of items, so that n batches of b items give exactly the gradient of one batch of
n·b items (for a loss that averages over its batch), the window at the end of an epoch
included, whatever its size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.nn.utils import clip_grad_value_, clip_grads_with_norm_, get_total_norm

from ember.data import Progress
from ember.train._counters import RunCounters
from ember.train._learner import Learner
from ember.train._step import StepContext, TrainOutput, in_slots, trained_parameters
from ember.train._strategy.ddp.strategy import DistributedDataParallel

__all__ = ["Clipping", "OptimizerWindow", "UnitClosure", "check_optimizer_step"]

log = logging.getLogger("ember.train")

Clipping = tuple[str, float, float]
"""``("norm", max_norm, norm_type)`` or ``("value", clip_value, 0.0)``."""


def check_optimizer_step(
    learner: Learner[Any],
    strategy: object,
    *,
    accumulation: int | None,
    clipping: Clipping | None,
    precision: str,
) -> None:
    """Refuse, before the run, what the optimizer step cannot do with ``learner``'s optimizers:
    a closure optimizer (LBFGS) re-evaluates one unit on one process, so no accumulation,
    clipping, gradient scaler or data-parallel processes; no optimizer, no gradient scaler."""
    if not learner.optimizer_or_factory and precision == "16-mixed":
        raise ValueError(
            "precision('16-mixed') unscales the gradients of an optimizer, and this Learner "
            "has none (its model's optimize updates the parameters): train in 'bf16-mixed' "
            "or '32'"
        )
    if not learner.steps_with_closure:
        return
    refused = [
        (accumulation is not None and accumulation > 1, "grads_accumulation(n)", "the "
         "closure re-evaluates one batch, not a window of several"),
        (clipping is not None, "clipping", "it would clip the first evaluation's gradients "
         "only: clip inside the model's own optimize(...)"),
        (precision == "16-mixed", "precision('16-mixed')", "torch's GradScaler does not "
         "step closure optimizers: use 'bf16-mixed' or '32'"),
        (isinstance(strategy, DistributedDataParallel), type(strategy).__name__, "each rank "
         "would stop evaluating after its own number of evaluations: train on one process "
         "(SingleDevice, MultiDevice)"),
    ]  # fmt: skip
    for bad, what, why in refused:
        if bad:
            raise ValueError(
                f"the optimizer steps with a closure (LBFGS), which {what} cannot go with: {why}"
            )


class OptimizerWindow:
    """Groups training units into optimizer steps; counts the steps taken and skipped."""

    __slots__ = (
        "_adjusts",
        "_filled",
        "_first_items",
        "_items",
        "autocast",
        "clipping",
        "counters",
        "mean",
        "measure_norm",
        "scaler",
        "size",
    )

    def __init__(
        self,
        size: int | None,
        *,
        mean: bool = False,
        clipping: Clipping | None = None,
        scaler: torch.amp.GradScaler | None = None,
        autocast: tuple[str, torch.dtype] | None = None,
        measure_norm: bool = False,
        counters: RunCounters | None = None,
    ) -> None:
        self.counters = RunCounters() if counters is None else counters
        """The run's counters: the window counts its optimizer steps there."""
        self.size = size or 1
        self.mean = mean and self.size > 1
        self.clipping = clipping
        self.scaler = scaler
        self.autocast = autocast
        self.measure_norm = (
            measure_norm or scaler is not None or (clipping is not None and clipping[0] == "norm")
        )
        self._adjusts = self.mean or self.measure_norm or clipping is not None or scaler is not None
        self._filled = 0
        self._items = 0
        self._first_items = 0

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps taken so far (skipped ones included)."""
        return self.counters.optimizer_steps

    @property
    def skipped_steps(self) -> int:
        """Steps skipped for non-finite 16-mixed gradients."""
        return self.counters.skipped_steps

    def context(
        self, epoch: int, iteration: int, batch: Any, items: int, progress: Progress | None = None
    ) -> StepContext:
        """The step context of the window's next unit, of ``items`` items (``progress``: the
        split's after it, which says whether the unit closes the window)."""
        factor = None
        if self.mean:
            if self._filled == 0:
                self._first_items = max(items, 1)
            factor = items / (self.size * self._first_items)
        self._items += items
        return StepContext(
            epoch,
            iteration,
            self.optimizer_steps,
            batch,
            self._filled > 0,
            factor,
            self.scaler,
            self.autocast,
            progress is None or self._filled + 1 == self.size or progress.is_completed,
        )

    def closes(self, progress: Progress) -> bool:
        """Count the unit in; True when it is the window's last (full, or the split ended)."""
        self._filled += 1
        return self._filled == self.size or progress.is_completed

    def step(
        self,
        learner: Learner[Any],
        closure: UnitClosure | None = None,
        *,
        before: Callable[[], None] | None = None,
    ) -> torch.Tensor | None:
        """One optimizer step with the gradients in the main model's ``.grad`` slots (see the
        module doc), ``closure`` the unit's loss function for a closure optimizer, ``before``
        called once the gradients are unscaled, before clipping (the callbacks'
        ``on_before_optimizer_step``); returns the total gradient norm before clipping when it
        was measured."""
        learner.lr_step()
        model = learner.model
        norm = None
        if self._adjusts or before is not None:  # nothing to adjust: straight to the optimizer
            norm = self._adjust(learner, before)
            if norm is not None and self.scaler is not None and not bool(torch.isfinite(norm)):
                self._skip(model)
                return norm
        learner.optimizer_step(in_slots(model), closure)
        if self.scaler is not None:
            self.scaler.update()
        self._stepped()
        return norm

    def _adjust(
        self, learner: Learner[Any], before: Callable[[], None] | None
    ) -> torch.Tensor | None:
        """Unscale, apply the mean's correction, call ``before``, measure and clip; returns the
        norm, if any."""
        scaler = self.scaler
        if scaler is not None:
            for optimizer in learner.optimizers.values():
                scaler.unscale_(optimizer)
        params = [param for _, param in trained_parameters(learner.model)]
        if self.mean and self._items != self.size * self._first_items:
            factor = self.size * self._first_items / self._items
            for param in params:
                if param.grad is not None:
                    param.grad.mul_(factor)
        if before is not None:
            before()
        norm = None
        clipping = self.clipping
        if self.measure_norm:
            norm_type = clipping[2] if clipping is not None and clipping[0] == "norm" else 2.0
            norm = get_total_norm([p.grad for p in params if p.grad is not None], norm_type)
        if clipping is not None:
            if clipping[0] == "value":
                clip_grad_value_(params, clipping[1])
            else:
                assert norm is not None  # measure_norm is set when clipping by norm
                clip_grads_with_norm_(params, clipping[1], norm)
        return norm

    def _skip(self, model: Any) -> None:
        """A 16-mixed step whose gradients are not finite: dropped, the scale lowered."""
        assert self.scaler is not None
        self.counters.skipped_steps += 1  # the scaler lowers its scale in update()
        log.info(
            "Optimizer step %d skipped: non-finite gradients at loss scale %g",
            self.optimizer_steps + 1,
            self.scaler.get_scale(),
        )
        for _, param in trained_parameters(model):
            param.grad = None
        self.scaler.update()
        self._stepped()

    def _stepped(self) -> None:
        self.counters.optimizer_steps += 1
        self._filled = self._items = 0

    def drop(self) -> None:
        """Forget a partial window (an interrupted split): its gradients are never applied."""
        self._filled = self._items = 0


class UnitClosure:
    """The loss function a closure optimizer (``torch.optim.LBFGS``) steps with, for one unit.

    Its first call returns the loss the unit's train step computed already (the gradients of
    that forward and backward are in the ``.grad`` slots); every later call runs the unit
    again through the strategy (``again``: the replicas given the parameters the optimizer
    just changed, then forward and backward), so each evaluation the optimizer asks for is one
    forward and one backward, none wasted. ``evaluations`` counts them.
    """

    __slots__ = ("_again", "_outputs", "evaluations")

    def __init__(
        self,
        outputs: Sequence[TrainOutput[Any]],
        again: Callable[[], Sequence[TrainOutput[Any]]],
    ) -> None:
        self._outputs: Sequence[TrainOutput[Any]] | None = outputs
        self._again = again
        self.evaluations = 1

    def __call__(self) -> torch.Tensor:
        outputs = self._outputs
        if outputs is None:
            outputs = self._again()
            self.evaluations += 1
        self._outputs = None
        losses = [output.loss for output in outputs]
        if not losses or any(loss is None for loss in losses):
            raise TypeError(
                "a closure optimizer reads the loss of every evaluation: build train_step's "
                "output with TrainOutput.from_loss(self, loss, output), which keeps it"
            )
        total: torch.Tensor = losses[0]  # type: ignore[assignment]  # checked above
        for loss in losses[1:]:  # several devices: their gradients are summed, so are these
            total = total + loss.to(total.device)  # type: ignore[union-attr]
        return total
