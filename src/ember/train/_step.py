"""What a user's model implements to be trained: the step protocols and their outputs.

A model is trained by a :class:`~ember.train.Learner` when it has ``train_step(batch)``, which runs
the forward and backward passes and returns a :class:`TrainOutput`, and ``inference_step(batch)``,
which runs the forward pass for validation. :class:`LearnerModel` is an ``nn.Module`` base class
that adds the default ``optimize`` (Burn's ``TrainStep::optimize``); override it to clip gradients
or weights around the optimizer step.

Gradients live where torch keeps them, in the parameters' ``.grad`` slots: a backward pass of an
accumulation window adds to them, as in a raw loop (and as torch's DDP reducer and gradient
scaler expect). :class:`GradientsParams` names them by parameter, for ``optimize`` overrides and
strategies that move gradients between replicas. While the loop runs a step, :func:`current_step`
says where it is (see :class:`StepContext`), in training and inference steps alike, and
``current_step().log(name, value)`` hands a value computed in a step (or in ``optimize``) to the
metrics (:class:`~ember.train.ValueMetric`).
"""

from __future__ import annotations

import contextvars
import functools
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import torch
from torch import nn

from ember._frozen import set_field

__all__ = [
    "GradientsAccumulator",
    "GradientsParams",
    "InferenceStep",
    "LearnerModel",
    "OptimizeStep",
    "StepContext",
    "TrainOutput",
    "TrainStep",
    "current_step",
    "default_optimize",
    "in_slots",
    "step_context",
    "trained_parameters",
]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
B_contra = TypeVar("B_contra", contravariant=True)


NamedParameters = tuple[tuple[str, nn.Parameter], ...]

# by id(module): a weak reference to the module and its parameters. A plain dict read by id
# costs a third of a WeakKeyDictionary's lookup, which builds a reference at every call: this
# runs several times a step. The reference's callback forgets a module that is gone.
_PARAMETERS: dict[int, tuple[weakref.ref[nn.Module], NamedParameters]] = {}


def trained_parameters(module: nn.Module, *, refresh: bool = False) -> NamedParameters:
    """``module``'s named parameters, read once and remembered (``refresh`` reads them again).

    Walking the module tree costs tens of microseconds, more than a small model's whole
    optimizer step, so the steps read it once, as an optimizer does: parameters added to a
    model after training started are not trained, exactly as they would not be in its
    optimizer. ``Learner.fork`` refreshes the list when training starts.
    """
    key = id(module)
    if not refresh:
        known = _PARAMETERS.get(key)
        if known is not None and known[0]() is module:
            return known[1]
    params = tuple(module.named_parameters())
    _PARAMETERS[key] = (weakref.ref(module, functools.partial(_forget, key)), params)
    return params


def _forget(key: int, _reference: object) -> None:
    """The module remembered under ``key`` is gone (unless a new one took its id already)."""
    known = _PARAMETERS.get(key)
    if known is not None and known[0]() is None:
        del _PARAMETERS[key]


@dataclass(frozen=True, slots=True, init=False)
class StepContext:
    """Where the loop is while a step runs (read with :func:`current_step`).

    ``epoch`` and ``iteration`` (1-based, within the epoch) locate the batch; ``optimizer_steps``
    counts the optimizer steps taken before this one; ``batch`` is what the step was given.
    ``split`` is ``"train"`` in ``train_step`` and ``optimize``; in ``inference_step`` it is
    ``"valid"`` (validation), the test's name (an evaluation, whose ``epoch`` is 0) or
    ``"predict"``: ``iteration == 1`` there is the first batch of the pass.
    ``accumulating`` is True for every batch of an accumulation window but the first: its
    backward adds to the gradients already in the ``.grad`` slots instead of replacing them.
    ``loss_factor`` multiplies the loss before backward (None: the loss as it is); ``scaler``
    (``precision("16-mixed")``) scales it after that. ``autocast`` is the ``(device type,
    dtype)`` the forward pass runs under (mixed precision), or None. ``closing`` is True when
    the unit is its window's last (the optimizer steps after it): a distributed strategy
    reduces the gradients over its processes only then. ``values`` holds what :meth:`log` was
    given in this step.
    """

    epoch: int
    iteration: int
    optimizer_steps: int
    batch: Any
    accumulating: bool = False
    loss_factor: float | None = None
    scaler: torch.amp.GradScaler | None = None
    autocast: tuple[str, torch.dtype] | None = None
    closing: bool = True
    split: str = "train"
    values: dict[str, Any] | None = None

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self,
        epoch: int,
        iteration: int,
        optimizer_steps: int,
        batch: Any,
        accumulating: bool = False,
        loss_factor: float | None = None,
        scaler: torch.amp.GradScaler | None = None,
        autocast: tuple[str, torch.dtype] | None = None,
        closing: bool = True,
        split: str = "train",
        values: dict[str, Any] | None = None,
    ) -> None:
        set_field(self, "epoch", epoch)
        set_field(self, "iteration", iteration)
        set_field(self, "optimizer_steps", optimizer_steps)
        set_field(self, "batch", batch)
        set_field(self, "accumulating", accumulating)
        set_field(self, "loss_factor", loss_factor)
        set_field(self, "scaler", scaler)
        set_field(self, "autocast", autocast)
        set_field(self, "closing", closing)
        set_field(self, "split", split)
        # one dict per batch, shared by the contexts a strategy derives from this one
        # (dataclasses.replace), so a value logged under any of them reaches the loop
        set_field(self, "values", {} if values is None else values)

    def log(self, name: str, value: torch.Tensor | float) -> None:
        """Hand ``value`` (a number, or a one-element tensor: it is read on the metrics thread,
        never here) to the metrics as ``name``: a :class:`~ember.train.ValueMetric` of that
        name logs it with this batch. Call it in ``train_step``, ``optimize`` (a GAN's
        generator loss) or ``inference_step``; a name logged twice in a step keeps the last
        value. Under a data-parallel strategy the main process's values are logged.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"log needs a non-empty metric name, got {name!r}")
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ValueError(
                    f"log({name!r}, ...) takes one number, got a tensor of shape "
                    f"{tuple(value.shape)}: reduce it first (e.g. value.mean())"
                )
            value = value.detach()  # the graph is freed with the step, not kept for a metric
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(
                f"log({name!r}, ...) takes a number or a one-element tensor, got "
                f"{type(value).__name__}"
            )
        values = self.values
        assert values is not None  # __init__ makes one
        values[name] = value


_CURRENT: contextvars.ContextVar[StepContext | None] = contextvars.ContextVar(
    "ember_step", default=None
)


def current_step() -> StepContext | None:
    """The :class:`StepContext` of the training step running now, or None outside the loop."""
    return _CURRENT.get()


class step_context:  # noqa: N801  # used as a context manager, like contextlib's
    """Make ``context`` the current step for the block (the loop's and strategies' tool: a
    device thread enters the context it is handed). Its ``autocast`` is the caller's to enter,
    around the forward pass only."""

    __slots__ = ("_context", "_token")

    def __init__(self, context: StepContext) -> None:
        self._context = context
        self._token: contextvars.Token[StepContext | None] | None = None

    def __enter__(self) -> StepContext:
        self._token = _CURRENT.set(self._context)
        return self._context

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None
        _CURRENT.reset(self._token)


class GradientsParams(Mapping[str, torch.Tensor]):
    """Gradients keyed by parameter name, as ``model.named_parameters()`` names them."""

    __slots__ = ("_grads", "owner")

    def __init__(
        self, grads: Mapping[str, torch.Tensor] | None = None, owner: nn.Module | None = None
    ) -> None:
        self._grads: dict[str, torch.Tensor] | None = dict(grads or {})
        self.owner = owner
        """The module whose ``.grad`` slots hold these very tensors (``from_module``), or None."""

    @classmethod
    def from_module(cls, module: nn.Module) -> GradientsParams:
        """The gradients in ``module``'s ``.grad`` slots (the same tensors, left in place)."""
        made = cls.__new__(cls)  # no copy of the fresh dict: this runs every step
        made._grads = _in_slots(module)
        made.owner = module
        return made

    def _read(self) -> dict[str, torch.Tensor]:
        """The gradients by name, read from the owner's slots the first time (:func:`in_slots`)."""
        grads = self._grads
        if grads is None:
            assert self.owner is not None  # in_slots sets it
            grads = self._grads = _in_slots(self.owner)
        return grads

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return f"GradientsParams({list(self._read())})"

    def assign_to(self, module: nn.Module) -> None:
        """Put these gradients into ``module``'s ``.grad`` slots (None for the ones absent)."""
        grads = self._read()
        for name, param in trained_parameters(module):
            param.grad = grads.get(name)


def _in_slots(module: nn.Module) -> dict[str, torch.Tensor]:
    return {
        name: grad for name, param in trained_parameters(module) if (grad := param.grad) is not None
    }


def in_slots(module: nn.Module) -> GradientsParams:
    """The gradients in ``module``'s ``.grad`` slots, read when first looked at: what the
    optimizer step hands ``optimize``, which reads them (if at all) before anything clears the
    slots. The default step never looks, so a step builds no mapping of the parameters."""
    made = GradientsParams.__new__(GradientsParams)
    made._grads = None
    made.owner = module
    return made


class GradientsAccumulator:
    """Sums :class:`GradientsParams` per parameter (Burn's accumulator).

    The loop accumulates in the ``.grad`` slots, as torch does; this sums gradients that were
    taken out of them, as a strategy does when it reduces each batch of a window on its own.
    """

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


@dataclass(frozen=True, slots=True, init=False)
class TrainOutput(Generic[T_co]):
    """What ``train_step`` returns: the gradients of the loss and the output for the metrics.

    ``loss`` is the loss they are the gradients of, as the step computed it (``from_loss``
    keeps it): a closure optimizer such as LBFGS reads it (``docs/training.md``, "Closures").
    """

    grads: GradientsParams
    item: T_co
    loss: torch.Tensor | None = None

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self, grads: GradientsParams, item: T_co, loss: torch.Tensor | None = None
    ) -> None:
        set_field(self, "grads", grads)
        set_field(self, "item", item)
        set_field(self, "loss", loss)

    @classmethod
    def from_loss(cls, model: nn.Module, loss: torch.Tensor, item: T) -> TrainOutput[T]:
        """Run ``loss.backward()`` and capture ``model``'s gradients (Burn's ``TrainOutput::new``).

        The ``.grad`` slots are cleared first, so every step starts from zero exactly like
        ``optimizer.zero_grad(set_to_none=True)`` in a raw loop, except inside an accumulation
        window (:attr:`StepContext.accumulating`), whose batches add to the window's gradients.
        The loop's :attr:`StepContext.loss_factor` multiplies the loss first, its gradient
        scaler scales it; the backward pass runs outside autocast, as torch recommends.
        """
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"loss must be a torch.Tensor, got {type(loss).__name__}")
        if not loss.requires_grad:
            raise ValueError(
                "loss does not require grad: it was computed without autograd "
                "(inside torch.no_grad()/inference_mode(), or from detached tensors)"
            )
        context = _CURRENT.get()
        if context is None or not context.accumulating:
            for _, param in trained_parameters(model):
                param.grad = None
        scaled = loss
        try:
            if context is None:
                torch.autograd.backward(loss)
            else:
                if context.loss_factor is not None:
                    scaled = scaled * context.loss_factor
                if context.scaler is not None:
                    scaled = context.scaler.scale(scaled)
                if context.autocast is None:
                    torch.autograd.backward(scaled)
                else:
                    with torch.autocast(context.autocast[0], enabled=False):
                        torch.autograd.backward(scaled)
        except RuntimeError as error:  # checked only on failure: nothing to pay per step
            if loss.numel() == 1:
                raise
            raise ValueError(
                f"loss has shape {tuple(loss.shape)}, not a scalar: backward needs one number; "
                "reduce it before TrainOutput.from_loss, e.g. `loss = loss.mean()` (or a "
                "criterion with reduction='mean')"
            ) from error
        return TrainOutput(GradientsParams.from_module(model), item, loss)


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


@runtime_checkable
class OptimizeStep(Protocol):
    """A model that runs its own optimizer step (``LearnerModel.optimize`` is the default)."""

    def optimize(self, optim: torch.optim.Optimizer, lr: float, grads: GradientsParams) -> None:
        """Apply one optimizer step with ``grads``."""
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
        need it (e.g. a manual weight decay). A Learner without an optimizer (``optim=None``)
        passes None as ``optim``: the override updates the parameters itself, by ``lr`` (the
        scheduler's value). ``current_step().log(name, value)`` logs what it computes.
        """
        default_optimize(self, optim, grads)


def default_optimize(
    module: nn.Module, optim: torch.optim.Optimizer, grads: GradientsParams
) -> None:
    """The default optimizer step: load ``grads`` into ``.grad``, step, then clear ``.grad``."""
    if grads.owner is not module:  # else they were taken from these very slots
        grads.assign_to(module)
    optim.step()
    for _, param in trained_parameters(module):
        param.grad = None
