"""``SWA``: stochastic weight averaging on torch's ``swa_utils``, written on the public callbacks.

The recipe of ``torch.optim.swa_utils``: from round ``start_epoch`` on, after each round the
weights are averaged into an ``AveragedModel`` (an equal average of the rounds' weights) and a
``SWALR`` scheduler steps, annealing every param group's lr to ``swa_lr`` over
``anneal_epochs`` rounds (``"cos"`` or ``"linear"``); its lrs replace the run's schedule from
then on (written into the param groups before each optimizer step; ``LearningRateMetric``
still shows the run's own schedule). When training ends, the model takes the averaged weights
and its batch-norm statistics are recomputed over one pass of the train loader
(``update_bn``, the model's forward run by the Learner's ``inference_step`` in train mode).

The averaged model (:attr:`SWA.averaged`) and the scheduler's state join every checkpoint, so a
resumed run averages exactly the same weights. ``launch`` returns the model with the SWA
weights; the checkpoints hold the training weights (and the average, in the callback's state).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel, update_bn

from ember._checks import check_positive_int, check_real
from ember.train._callbacks.base import Callback, RunView
from ember.train._callbacks.ema import refuse_sharded, swap_in

__all__ = ["SWA"]


class _Forward(nn.Module):
    """The model's forward as the Learner runs it on a batch (``update_bn`` calls this)."""

    def __init__(self, run: RunView) -> None:
        super().__init__()
        self.model = run.model  # a submodule: update_bn finds its batch-norm layers
        self._step = run.learner.inference_step

    def forward(self, batch: Any) -> Any:
        return self._step(batch)


class SWA(Callback):
    """Stochastic weight averaging on torch's ``swa_utils`` (AveragedModel, SWALR, update_bn).

    ``swa_lr`` (one lr, or one per param group), averaging from round ``start_epoch``
    (1-based), the lr annealed over ``anneal_epochs`` rounds with ``anneal_strategy``;
    ``update_bn`` recomputes batch-norm statistics at the end (see the module doc)."""

    def __init__(
        self,
        swa_lr: float | Sequence[float],
        *,
        start_epoch: int,
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        update_bn: bool = True,
    ) -> None:
        lrs = [swa_lr] if isinstance(swa_lr, int | float) else list(swa_lr)
        self.swa_lr = [check_real("swa_lr", lr, minimum=0.0) for lr in lrs]
        if not self.swa_lr:
            raise ValueError("swa_lr needs at least one lr")
        self.start_epoch = check_positive_int("start_epoch", start_epoch)
        if isinstance(anneal_epochs, bool) or not isinstance(anneal_epochs, int):
            raise TypeError(f"anneal_epochs must be an int, got {anneal_epochs!r}")
        if anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be >= 0, got {anneal_epochs}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
        self.anneal_epochs, self.anneal_strategy = anneal_epochs, anneal_strategy
        self.update_bn = update_bn
        self.averaged: AveragedModel | None = None
        """The equal average of the rounds' weights since ``start_epoch``."""
        self._run: RunView | None = None
        self._scheduler: SWALR | None = None
        self._lrs: list[float] | None = None  # SWALR's lrs, written before each step
        self._pending: dict[str, Any] | None = None

    def on_run_start(self, run: RunView) -> None:
        refuse_sharded(run.model, "SWA")
        self._run = run
        if self.averaged is None:
            self.averaged = AveragedModel(run.model)
        if self._scheduler is None:  # made before training, as torch's recipe does: its
            self._scheduler = self._new_scheduler(run.optimizer)  # first step keeps the lrs
        if self._pending is not None:
            self._restore(self._pending)
            self._pending = None

    def on_before_optimizer_step(self, step: RunView) -> None:
        lrs = self._lrs
        if lrs is not None:  # after the run's schedule wrote its lrs: SWALR's replace them
            for group, lr in zip(step.optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr

    def on_epoch_end(self, epoch: int) -> None:
        if epoch < self.start_epoch:
            return
        run, averaged = self._run, self.averaged
        assert run is not None and averaged is not None
        averaged.update_parameters(run.model)
        assert self._scheduler is not None  # made by on_run_start
        self._scheduler.step()
        self._lrs = [float(group["lr"]) for group in run.optimizer.param_groups]

    def _new_scheduler(self, optimizer: torch.optim.Optimizer) -> SWALR:
        lr: float | list[float] = self.swa_lr[0] if len(self.swa_lr) == 1 else self.swa_lr
        return SWALR(
            optimizer,
            swa_lr=lr,  # type: ignore[arg-type]  # torch takes a float or one per group
            anneal_epochs=self.anneal_epochs,
            anneal_strategy=self.anneal_strategy,  # type: ignore[arg-type]  # checked above
        )

    def on_run_end(self, run: RunView) -> None:
        averaged = self.averaged
        if averaged is None or int(averaged.n_averaged) == 0:
            return  # no round was averaged: the model stays as trained
        swap_in(run.model, averaged.module, buffers=False)
        if self.update_bn:
            update_bn(([batch] for batch in run.train_loader), _Forward(run))

    def state_dict(self) -> dict[str, Any]:
        """The averaged model's state, the SWA scheduler's, and the lrs it set (once the
        averaging started)."""
        if self.averaged is None or self._scheduler is None:
            return {} if self._pending is None else dict(self._pending)
        state: dict[str, Any] = {
            "averaged": dict(self.averaged.state_dict()),
            "scheduler": self._scheduler.state_dict(),  # JSON: its counters and lrs
        }
        if self._lrs is not None:
            state["lrs"] = list(self._lrs)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (kept until the run starts)."""
        if not isinstance(state, dict) or "averaged" not in state or "scheduler" not in state:
            raise ValueError(f"a SWA state holds 'averaged' and 'scheduler': {state!r}")
        if self._scheduler is None:
            self._pending = state
        else:
            self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        assert self.averaged is not None and self._scheduler is not None
        self.averaged.load_state_dict(state["averaged"])
        self._scheduler.load_state_dict(dict(state["scheduler"]))
        lrs = state.get("lrs")
        self._lrs = None if lrs is None else [float(lr) for lr in lrs]

    def __repr__(self) -> str:
        return (
            f"SWA(swa_lr={self.swa_lr!r}, start_epoch={self.start_epoch}, "
            f"anneal_epochs={self.anneal_epochs}, anneal_strategy={self.anneal_strategy!r})"
        )
