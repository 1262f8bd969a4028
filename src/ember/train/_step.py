"""What a user's model implements to be trained: the step protocols and their outputs.

A model is trained by a :class:`~ember.train.Learner` when it has ``train_step(batch)``, which runs
the forward and backward passes and returns a :class:`TrainOutput`, and ``inference_step(batch)``,
which runs the forward pass for validation. :class:`LearnerModel` is an ``nn.Module`` base class
that adds the default ``optimize`` (Burn's ``TrainStep::optimize``); override it to clip gradients
or weights around the optimizer step.

Gradients travel as :class:`GradientsParams`, a mapping from parameter name to gradient, so that
accumulation and multi-device reduction work on plain tensors and never on ``.grad`` slots that
the next backward pass would add to.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import torch
from torch import nn

__all__ = [
    "GradientsAccumulator",
    "GradientsParams",
    "InferenceStep",
    "LearnerModel",
    "TrainOutput",
    "TrainStep",
    "default_optimize",
    "trained_parameters",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
B_contra = TypeVar("B_contra", contravariant=True)


_PARAMETERS: weakref.WeakKeyDictionary[nn.Module, tuple[tuple[str, nn.Parameter], ...]] = (
    weakref.WeakKeyDictionary()
)


def trained_parameters(
    module: nn.Module, *, refresh: bool = False
) -> tuple[tuple[str, nn.Parameter], ...]:
    """``module``'s named parameters, read once and remembered (``refresh`` reads them again).

    Walking the module tree costs tens of microseconds, more than a small model's whole
    optimizer step, so the steps read it once, as an optimizer does: parameters added to a
    model after training started are not trained, exactly as they would not be in its
    optimizer. ``Learner.fork`` refreshes the list when training starts.
    """
    params = None if refresh else _PARAMETERS.get(module)
    if params is None:
        params = _PARAMETERS[module] = tuple(module.named_parameters())
    return params


class GradientsParams(Mapping[str, torch.Tensor]):
    """Gradients keyed by parameter name, as ``model.named_parameters()`` names them."""

    __slots__ = ("_grads",)

    def __init__(self, grads: Mapping[str, torch.Tensor] | None = None) -> None:
        self._grads: dict[str, torch.Tensor] = dict(grads or {})

    @classmethod
    def from_module(cls, module: nn.Module) -> GradientsParams:
        """Take the gradients out of ``module``'s ``.grad`` slots, leaving them empty."""
        grads: dict[str, torch.Tensor] = {}
        for name, param in trained_parameters(module):
            if param.grad is not None:
                grads[name] = param.grad
                param.grad = None
        return cls(grads)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._grads[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._grads)

    def __len__(self) -> int:
        return len(self._grads)

    def __repr__(self) -> str:
        return f"GradientsParams({list(self._grads)})"

    def assign_to(self, module: nn.Module) -> None:
        """Put these gradients into ``module``'s ``.grad`` slots (None for the ones absent)."""
        for name, param in trained_parameters(module):
            param.grad = self._grads.get(name)


class GradientsAccumulator:
    """Sums gradients per parameter over several batches (``grads_accumulation``)."""

    __slots__ = ("_sum",)

    def __init__(self) -> None:
        self._sum: dict[str, torch.Tensor] = {}

    def accumulate(self, grads: GradientsParams) -> None:
        """Add ``grads`` to the running sum; the first tensors are adopted, not copied."""
        for name, grad in grads.items():
            total = self._sum.get(name)
            if total is None:
                self._sum[name] = grad
            else:
                total.add_(grad)

    def is_empty(self) -> bool:
        """True when nothing was accumulated since the last :meth:`grads`."""
        return not self._sum

    def grads(self) -> GradientsParams:
        """The summed gradients; the accumulator starts empty again."""
        grads = GradientsParams(self._sum)
        self._sum = {}
        return grads


@dataclass(frozen=True, slots=True)
class TrainOutput(Generic[T_co]):
    """What ``train_step`` returns: the gradients of the loss and the output for the metrics."""

    grads: GradientsParams
    item: T_co

    @classmethod
    def from_loss(cls, model: nn.Module, loss: torch.Tensor, item: T) -> TrainOutput[T]:
        """Run ``loss.backward()`` and capture ``model``'s gradients (Burn's ``TrainOutput::new``).

        Any gradient left in the ``.grad`` slots beforehand is discarded first, so every step
        starts from zero exactly like ``optimizer.zero_grad(set_to_none=True)`` in a raw loop.
        """
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"loss must be a torch.Tensor, got {type(loss).__name__}")
        if not loss.requires_grad:
            raise ValueError(
                "loss does not require grad: it was computed without autograd "
                "(inside torch.no_grad()/inference_mode(), or from detached tensors)"
            )
        for _, param in trained_parameters(model):
            param.grad = None
        torch.autograd.backward(loss)
        return TrainOutput(GradientsParams.from_module(model), item)


@runtime_checkable
class TrainStep(Protocol[B_contra, T_co]):
    """A model that can be trained: forward and backward on one batch."""

    def train_step(self, batch: B_contra) -> TrainOutput[T_co]:
        """Run forward and backward on ``batch``; usually ends with ``TrainOutput.from_loss``."""
        ...


@runtime_checkable
class InferenceStep(Protocol[B_contra, T_co]):
    """A model that can be validated: forward only on one batch."""

    def inference_step(self, batch: B_contra) -> T_co:
        """Run the forward pass on ``batch`` and return the output the metrics read."""
        ...


class LearnerModel(nn.Module):
    """Base class for models trained by ember: an ``nn.Module`` with the default ``optimize``.

    Subclasses implement ``train_step`` and ``inference_step``. Inheriting is optional: any
    ``nn.Module`` with those two methods can be trained; it then gets this default ``optimize``.
    """

    def train_step(self, batch: Any) -> TrainOutput[Any]:
        """Forward and backward on one batch; subclasses must override."""
        raise NotImplementedError(f"{type(self).__name__} must implement train_step(batch)")

    def inference_step(self, batch: Any) -> Any:
        """Forward on one batch for validation; subclasses must override."""
        raise NotImplementedError(f"{type(self).__name__} must implement inference_step(batch)")

    def optimize(self, optim: torch.optim.Optimizer, lr: float, grads: GradientsParams) -> None:
        """Apply one optimizer step with ``grads``; override to clip, project or log around it.

        ``lr`` has already been written into every param group; it is passed for overrides that
        need it (e.g. a manual weight decay).
        """
        default_optimize(self, optim, grads)


def default_optimize(
    module: nn.Module, optim: torch.optim.Optimizer, grads: GradientsParams
) -> None:
    """The default optimizer step: load ``grads`` into ``.grad``, step, then clear ``.grad``."""
    grads.assign_to(module)
    optim.step()
    for _, param in trained_parameters(module):
        param.grad = None
