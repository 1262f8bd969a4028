"""``EMA``: an exponential moving average of the weights, written on the public callbacks alone.

torch's semantics (``torch.optim.swa_utils.AveragedModel`` with ``get_ema_multi_avg_fn``): the
first update copies the weights, each later one (after every optimizer step) makes
``ema = decay * ema + (1 - decay) * w``; with ``use_buffers`` the buffers (batch-norm
statistics) are averaged too. The averaged model is at :attr:`EMA.averaged` and joins every
checkpoint (the callback's state), so a resumed run's average is bit-identical.

With ``use_averaged=True`` the run validates the averaged weights, its round-end checkpoints
hold them (so the best checkpoint, ``with_test``, ``load_checkpoint`` and ``export_*`` see
the average, ranked by the average's validation) and ``launch`` returns the model holding
them. The training weights are kept aside meanwhile (the callback's state has them when a
checkpoint holds the average) and put back before training goes on, so training itself is
the same as without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ember._checks import check_real
from ember.train._callbacks.base import Callback, RunView
from ember.train._vocabulary import Split

__all__ = ["EMA", "refuse_sharded", "swap_in", "weights"]


def weights(model: nn.Module, *, buffers: bool) -> Iterator[tuple[str, torch.Tensor]]:
    """``model``'s parameters (and its floating-point buffers with ``buffers``), by name."""
    yield from model.named_parameters()
    if buffers:
        yield from ((name, b) for name, b in model.named_buffers() if b.is_floating_point())


def refuse_sharded(model: nn.Module, who: str) -> None:
    """Refuse a model whose parameters are sharded (``FullyShardedDataParallel``): an averaged
    copy of it would be a copy of this rank's shards."""
    from torch.distributed.tensor import DTensor

    if any(isinstance(param, DTensor) for param in model.parameters()):
        raise ValueError(
            f"{who} averages a copy of the whole model, and this one is sharded "
            "(FullyShardedDataParallel): train it with DistributedDataParallel or on one "
            f"device to use {who}"
        )


def swap_in(model: nn.Module, source: nn.Module, *, buffers: bool) -> dict[str, torch.Tensor]:
    """Copy ``source``'s weights into ``model``; returns ``model``'s weights as they were."""
    kept: dict[str, torch.Tensor] = {}
    averaged = dict(weights(source, buffers=buffers))
    with torch.no_grad():
        for name, tensor in weights(model, buffers=buffers):
            kept[name] = tensor.detach().clone()
            tensor.copy_(averaged[name])
    return kept


class EMA(Callback):
    """An exponential moving average of the weights after every optimizer step (torch's).

    ``decay`` in ``[0, 1)``; ``use_buffers`` averages the buffers too; ``use_averaged``
    validates, checkpoints and returns the averaged weights (see the module doc)."""

    def __init__(
        self, decay: float = 0.999, *, use_buffers: bool = True, use_averaged: bool = False
    ) -> None:
        self.decay = check_real("decay", decay, minimum=0.0, maximum=1.0, strict_maximum=True)
        for name, value in (("use_buffers", use_buffers), ("use_averaged", use_averaged)):
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {value!r}")
        self.use_buffers, self.use_averaged = use_buffers, use_averaged
        self.averaged: AveragedModel | None = None
        """The averaged model (``.module`` is the averaged copy of the model), once the run
        started."""
        self._model: nn.Module | None = None
        self._training: dict[str, torch.Tensor] | None = None  # kept aside while swapped in
        self._pending: dict[str, Any] | None = None  # a checkpoint's state, before the run

    def on_run_start(self, run: RunView) -> None:
        refuse_sharded(run.model, "EMA")
        self._model = run.model
        if self.averaged is None:
            self.averaged = AveragedModel(
                run.model,
                multi_avg_fn=get_ema_multi_avg_fn(self.decay),  # type: ignore[no-untyped-call]  # torch's, untyped
                use_buffers=self.use_buffers,
            )
        if self._pending is not None:
            self._restore(self._pending)
            self._pending = None

    def on_after_optimizer_step(self, step: RunView) -> None:
        assert self.averaged is not None  # made by on_run_start
        self.averaged.update_parameters(step.model)

    def on_epoch_start(self, epoch: int) -> None:
        self._swap_out()

    def on_split_start(self, split: Split, epoch: int) -> None:
        if split is Split.VALID:
            self._swap_in()

    def on_epoch_end(self, epoch: int) -> None:
        self._swap_in()  # a run that trains only: the round's checkpoint holds the average

    def on_run_end(self, run: RunView) -> None:
        self._swap_in()

    def _swap_in(self) -> None:
        """With ``use_averaged``: the model holds the averaged weights, the training ones are
        kept aside."""
        if not self.use_averaged or self._training is not None or self.averaged is None:
            return
        if int(self.averaged.n_averaged) == 0:
            return  # nothing averaged yet (no step): the weights are the average
        assert self._model is not None
        self._training = swap_in(self._model, self.averaged.module, buffers=self.use_buffers)

    def _swap_out(self) -> None:
        """Put the training weights back before training goes on."""
        training, self._training = self._training, None
        if training is None:
            return
        assert self._model is not None
        with torch.no_grad():
            for name, tensor in weights(self._model, buffers=self.use_buffers):
                tensor.copy_(training[name])

    def state_dict(self) -> dict[str, Any]:
        """The averaged model's state and, while the model holds the average, the training
        weights (tensors, saved as safetensors)."""
        if self.averaged is None:
            return {} if self._pending is None else dict(self._pending)
        state: dict[str, Any] = {"averaged": dict(self.averaged.state_dict())}
        if self._training is not None:
            state["training"] = dict(self._training)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned (kept until the run starts, when the
        averaged model is made)."""
        if not isinstance(state, dict) or "averaged" not in state:
            raise ValueError(f"an EMA state holds 'averaged' (and maybe 'training'): {state!r}")
        if self.averaged is None:
            self._pending = state
        else:
            self._restore(state)

    def _restore(self, state: dict[str, Any]) -> None:
        assert self.averaged is not None
        self.averaged.load_state_dict(state["averaged"])
        training = state.get("training")
        self._training = None if training is None else dict(training)

    def __repr__(self) -> str:
        return (
            f"EMA(decay={self.decay!r}, use_buffers={self.use_buffers!r}, "
            f"use_averaged={self.use_averaged!r})"
        )
