"""The Learner: a model with its optimizer and learning-rate scheduler (Burn's ``Learner``)."""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast

import torch
from torch import nn

from ember.train._first_batch import first_train_step
from ember.train._lr_scheduler.base import (
    EpochLrScheduler,
    GroupLrScheduler,
    LrScheduler,
    as_scheduler,
)
from ember.train._lr_scheduler.torch_adapter import TorchLrScheduler
from ember.train._plain import Loss, PlainSteps
from ember.train._step import (
    GradientsParams,
    InferenceStep,
    LearnerModel,
    OptimizeStep,
    TrainOutput,
    TrainStep,
    default_optimize,
    trained_parameters,
)
from ember.train._task import Task, check_task

__all__ = ["Learner", "OptimizerFactory", "OptimizerLike"]

M = TypeVar("M", bound=nn.Module)
OptimizerFactory = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]
OptimizerLike = torch.optim.Optimizer | OptimizerFactory


class _OwnSteps(TrainStep[Any, Any], InferenceStep[Any, Any], Protocol):
    """A model with both steps of its own (a ``LearnerModel``)."""


class Learner(Generic[M]):
    """Holds what training changes: the model, the optimizer and the scheduler.

    ``optim`` is an optimizer built on ``model.parameters()``, or a factory called with the
    parameters once the model is on its training device (the safe choice for optimizers whose
    state must live on that device). ``lr_scheduler`` decides the learning rates:

    * None: the optimizer's own lr of every param group, as built (a torch user's default);
    * a float (a constant) or an ember :class:`LrScheduler`: its value is **the lr of param
      group 0**, and every other group keeps its ratio to group 0 as the optimizer was built
      (groups at 1e-3 and 1e-2 scheduled at 5e-4 train at 5e-4 and 5e-3); with one group the
      value is the lr, exactly;
    * a ``torch.optim.lr_scheduler`` object (or a :class:`TorchLrScheduler`): it drives each
      group's lr itself, as in a raw torch loop, per optimizer step or per epoch.

    The lrs are written into the param groups right before every optimizer step.

    Several optimizers (a GAN's generator and discriminator) come as a mapping of names to
    optimizers or factories; each keeps its own lrs (no ``lr_scheduler``: drive them with torch
    schedulers inside ``optimize``), and the model's own ``optimize(optimizers, lr, grads)``
    receives the mapping and steps them as it needs (``LearnerModel``'s default cannot know
    how). No optimizer (``optim=None``): the model's own ``optimize(None, lr, grads)`` updates
    the parameters itself (``lr``: the scheduler's value, None without one). An optimizer whose
    ``step`` needs a closure (``torch.optim.LBFGS``) is stepped with the unit's loss function:
    its first evaluation is the step's own forward and backward, each later one runs the step
    again (``docs/training.md``, "Closures").

    The model is a :class:`LearnerModel` (any ``nn.Module`` with ``train_step`` and
    ``inference_step``), or a plain ``nn.Module``: with ``loss`` (``F.cross_entropy``, an
    ``nn.Module`` loss) each batch ``(x, y)`` trains ``loss(model(x), y)``; without it, a model
    whose forward returns its own loss (a Hugging Face model given its ``labels``) trains
    ``model(**batch).loss``. ``task`` (``"classification"``, ``"regression"``,
    ``"multilabel"``, ``"causal-lm"``) says which output the metrics read; None tells it from
    the first batch and says so in ``experiment.log`` (``ember/train/_plain.py``,
    ``_task.py``).
    """

    def __init__(
        self,
        model: M,
        optim: OptimizerLike | Mapping[str, OptimizerLike] | None = None,
        lr_scheduler: LrScheduler | float | torch.optim.lr_scheduler.LRScheduler | None = None,
        *,
        loss: Loss | None = None,
        task: Task | None = None,
    ) -> None:
        _check_model(model)
        self._plain = _plain_steps(model, loss, check_task(task))
        self._several = optim is None or isinstance(optim, Mapping)
        self._optims: dict[str, OptimizerLike] = _given_optimizers(optim)
        self._first = next(iter(self._optims), None)  # whose param group 0 sets lr_current
        _check_optimize(model, self._optims, isinstance(optim, Mapping), lr_scheduler)
        self._model = model
        # the model's own steps, looked up at each call as a method is (both checked above)
        self._own = cast("_OwnSteps", model)
        self._scheduler = None if lr_scheduler is None else as_scheduler(lr_scheduler)
        self._ratios: list[float] | None = None  # each group's lr over group 0's, as built
        # resolved once: a runtime protocol check costs more than a small model's step
        self._built: dict[str, torch.optim.Optimizer] | None = None
        # the model's own optimize, else the default step is called directly (what
        # LearnerModel.optimize does), with the optimizer looked up once built
        self._optimizes = _own_optimize(model) or "optimize" in vars(model)
        self._closure = False  # an optimizer steps with a closure: found once they are built
        self._per_group = isinstance(self._scheduler, GroupLrScheduler)
        self._per_epoch: EpochLrScheduler | None = (
            self._scheduler if isinstance(self._scheduler, EpochLrScheduler) else None
        )  # asked at every epoch's end
        self._lr_current: float | None = None
        self._first_step = True  # the first train_step is checked (_first_batch.py)

    @property
    def model(self) -> M:
        """The model being trained (the same object, not a copy)."""
        return self._model

    @property
    def task(self) -> Task | None:
        """The task of a plain model (given, or told by its first batch); None for a model
        with its own steps, or when only the loss is logged."""
        return None if self._plain is None else self._plain.task

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer (built from its factory on first use); see :attr:`optimizers` for a
        Learner with several."""
        if not self._optims:
            raise TypeError(
                "this Learner has no optimizer: the model's optimize updates the parameters"
            )
        if self._several:
            raise TypeError(
                f"this Learner has several optimizers ({', '.join(self._optims)}): use "
                "learner.optimizers"
            )
        return self.optimizers["optimizer"]

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Every optimizer by name (``{"optimizer": ...}`` for a single one); factories are
        called on first use."""
        ready = self._built
        if ready is not None:
            return ready
        for name, value in self._optims.items():
            if not isinstance(value, torch.optim.Optimizer):
                built = value(self._model.parameters())
                if not isinstance(built, torch.optim.Optimizer):
                    raise TypeError(
                        f"the optimizer factory {name!r} returned {type(built).__name__}, "
                        "not a torch.optim.Optimizer"
                    )
                self._optims[name] = built
        optimizers: dict[str, torch.optim.Optimizer] = self._optims  # type: ignore[assignment]
        self._built = optimizers  # every factory was called above
        self._closure = not _own_optimize(self._model) and any(
            _needs_closure(optimizer) for optimizer in optimizers.values()
        )
        return optimizers

    @property
    def several_optimizers(self) -> bool:
        """True when the optimizers came as a mapping (or there is none: ``optim=None``)."""
        return self._several

    @property
    def steps_with_closure(self) -> bool:
        """True when the optimizer's ``step`` needs a closure (``torch.optim.LBFGS``) and the
        Learner steps it (the model has no ``optimize`` of its own): the loop then hands
        :meth:`optimizer_step` the unit's loss function. Before :meth:`bind` a factory other
        than an optimizer class (or a ``functools.partial`` of one) counts as False."""
        if self._built is not None:
            return self._closure
        return not _own_optimize(self._model) and any(
            _closure_class(kind) for kind in map(_optimizer_class, self._optims.values()) if kind
        )

    @property
    def lr_scheduler(self) -> LrScheduler | None:
        """The learning-rate scheduler (None: the optimizer's own lrs)."""
        return self._scheduler

    @property
    def optimizer_or_factory(self) -> OptimizerLike | dict[str, OptimizerLike]:
        """The optimizer if it exists, else the factory that will make it (not called here:
        describing a run must not build its optimizer before the model is placed); a mapping
        of them for several optimizers (empty for none)."""
        return dict(self._optims) if self._several else self._optims["optimizer"]

    @property
    def lr_current(self) -> float | None:
        """The lr of the last :meth:`lr_step`; None before the first one. A resumed run sets it
        back to the checkpoint's, so batches before its first step log the lr they would have."""
        return self._lr_current

    @lr_current.setter
    def lr_current(self, lr: float | None) -> None:
        self._lr_current = lr

    def fork(self, device: torch.device | str) -> None:
        """Move the model to ``device``, then :meth:`bind` the optimizers to it."""
        self._model.to(device)
        self.bind()

    def bind(self) -> None:
        """The model is placed (moved, replicated or sharded by a strategy): build each
        optimizer that came as a factory on its parameters, and check every optimizer holds
        the model's parameters.

        ValueError if an optimizer holds a parameter that is not the model's (an optimizer
        built on another model, or on this one before a copy or a strategy replaced its
        parameters, would train nothing).
        """
        names = {id(param): name for name, param in trained_parameters(self._model, refresh=True)}
        for optimizer in self.optimizers.values():
            for index, group in enumerate(optimizer.param_groups):
                for position, param in enumerate(group["params"]):
                    if id(param) not in names:
                        raise ValueError(
                            f"the optimizer's parameter {position} of group {index} (shape "
                            f"{tuple(param.shape)}) is not a parameter of the model "
                            f"{type(self._model).__name__}: build the optimizer on "
                            "model.parameters() of the model being trained, or pass a factory "
                            "(lambda params: torch.optim.Adam(params)) that ember calls once "
                            "the model is placed"
                        )
        scheduler = self._scheduler
        if scheduler is not None and self._optims and not isinstance(scheduler, GroupLrScheduler):
            self._group_ratios()  # the groups' lrs as built, before any step writes them

    def train_step(self, batch: Any) -> TrainOutput[Any]:
        """The model's forward and backward pass on ``batch``; the first one's output and batch
        are checked, so a protocol mistake is named with the line to write."""
        if self._first_step:
            output = first_train_step(self._model, self._train_step, batch)
            self._first_step = False
            return output
        return self._train_step(batch)

    def _train_step(self, batch: Any) -> TrainOutput[Any]:
        plain = self._plain
        if plain is None:
            return self._own.train_step(batch)
        return plain.train_step(self._model, batch)

    def inference_step(self, batch: Any) -> Any:
        """The model's forward pass on ``batch`` for the metrics: its own ``inference_step``,
        or for a plain model the output of its loss and task (what validation runs; give it
        to ``predict(..., step=learner.inference_step)`` or ``EvaluatorBuilder.build``)."""
        plain = self._plain
        if plain is None:
            return self._own.inference_step(batch)
        return plain.inference_step(self._model, batch)

    def train_step_of(self, model: nn.Module) -> Callable[[Any], TrainOutput[Any]]:
        """The train step run on ``model``, a copy of the Learner's model (a strategy's replica
        on another device): its own ``train_step``, or a plain model's step built from the
        Learner's loss and task."""
        if self._plain is None:
            return cast("TrainStep[Any, Any]", model).train_step  # a replica of the checked one
        return functools.partial(self._plain.train_step, model)

    def lr_step(self) -> float | None:
        """Advance the scheduler and write the lrs into the param groups (see the class doc);
        returns param group 0's lr (the scheduler's value without an optimizer, None without
        either)."""
        scheduler = self._scheduler
        if self._first is None:  # no optimizer: the model's optimize takes the value
            self._lr_current = None if scheduler is None else scheduler.step()
            return self._lr_current
        built = self._built
        groups = (built if built is not None else self.optimizers)[self._first].param_groups
        if scheduler is None:
            lr = float(groups[0]["lr"])
        elif self._per_group:
            lrs = scheduler.step_all()  # type: ignore[attr-defined]  # a GroupLrScheduler
            for group, value in zip(groups, lrs, strict=True):
                group["lr"] = value
            lr = lrs[0]
        else:
            lr = scheduler.step()
            ratios = self._ratios if self._ratios is not None else self._group_ratios()
            if len(ratios) == 1:
                groups[0]["lr"] = lr
            else:
                for group, ratio in zip(groups, ratios, strict=True):
                    group["lr"] = lr if ratio == 1.0 else lr * ratio
        self._lr_current = lr
        return lr

    def end_epoch(self, value: float | None = None) -> None:
        """An epoch ended: advance a per-epoch scheduler (``value``: its monitored metric's
        validation value)."""
        if self._per_epoch is not None:
            self._per_epoch.end_epoch(value)

    def end_training(self) -> None:
        """Training ended: a torch scheduler stepped per optimizer step takes the advance it
        owes the last one, so the optimizer's lrs and the scheduler's state are where a raw
        ``optimizer.step(); scheduler.step()`` loop leaves them."""
        if isinstance(self._scheduler, TorchLrScheduler):
            self._scheduler.end_training()

    @property
    def monitor(self) -> str | None:
        """The validation metric the scheduler is stepped with after each epoch, or None."""
        return None if self._per_epoch is None else self._per_epoch.monitor

    def _group_ratios(self) -> list[float]:
        if self._ratios is None:
            groups = self.optimizer.param_groups
            base = float(groups[0]["lr"])
            if base <= 0 and len(groups) > 1:
                raise ValueError(
                    "param group 0 has lr 0, so the other groups' lrs cannot be kept relative "
                    "to it: give group 0 a positive lr, or drive the groups with a torch scheduler"
                )
            self._ratios = [1.0 if base <= 0 else float(g["lr"]) / base for g in groups]
        return self._ratios

    def optimizer_step(
        self, grads: GradientsParams, closure: Callable[[], torch.Tensor] | None = None
    ) -> None:
        """One optimizer step with ``grads``, through the model's ``optimize`` if it has one.

        ``closure`` is the unit's loss function for an optimizer that steps with one
        (:attr:`steps_with_closure`): its first call returns the loss whose gradients
        ``grads`` are, each later call computes the loss and its gradients again.
        """
        if self._closure:
            if closure is None:
                raise TypeError(
                    f"{type(self.optimizer).__name__} steps with a closure: call "
                    "optimizer_step(grads, closure), the closure computing the loss and its "
                    "gradients again"
                )
            if grads.owner is not self._model:  # else they were taken from these very slots
                grads.assign_to(self._model)
            self.optimizer.step(closure)  # type: ignore[arg-type]  # returns the loss tensor
            for _, param in trained_parameters(self._model):
                param.grad = None
        elif not self._optims:
            self._model.optimize(None, self._lr_current, grads)  # type: ignore[operator]
        elif self._several:
            self._model.optimize(self.optimizers, self._lr_current, grads)  # type: ignore[operator]
        else:
            optimizer = (self._built or self.optimizers)["optimizer"]  # the only one
            if self._optimizes:
                self._model.optimize(optimizer, self._lr_current, grads)  # type: ignore[operator]
            else:
                default_optimize(self._model, optimizer, grads)


def _own_optimize(model: nn.Module) -> bool:
    """Whether ``model`` steps its optimizers itself (not ``LearnerModel``'s default)."""
    return isinstance(model, OptimizeStep) and type(model).optimize is not LearnerModel.optimize


_CLOSURES: dict[type[torch.optim.Optimizer], bool] = {}  # by optimizer class, found once


def _closure_class(kind: type[torch.optim.Optimizer]) -> bool:
    """Whether ``kind.step`` has a ``closure`` parameter without a default."""
    found = _CLOSURES.get(kind)
    if found is None:
        step = inspect.signature(kind.step).parameters.get("closure")
        found = _CLOSURES[kind] = step is not None and step.default is inspect.Parameter.empty
    return found


def _optimizer_class(value: OptimizerLike) -> type[torch.optim.Optimizer] | None:
    """The optimizer class ``value`` is or makes, when it says so without being called."""
    if isinstance(value, functools.partial):
        value = value.func
    if isinstance(value, torch.optim.Optimizer):
        return type(value)
    if isinstance(value, type) and issubclass(value, torch.optim.Optimizer):
        return value
    return None


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` takes a closure it cannot do without (``LBFGS.step``)."""
    return _closure_class(type(optimizer))


def _check_model(model: object) -> None:
    """A module ember can call: not a ``torch.compile`` wrapper."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    dynamo = sys.modules.get("torch._dynamo")  # loaded once anything was compiled
    if dynamo is not None and isinstance(model, dynamo.eval_frame.OptimizedModule):
        raise TypeError(
            "model is a torch.compile wrapper: ember calls its train_step and "
            "inference_step, which reach the original module uncompiled; pass the module "
            "itself and compile it in place with SupervisedTraining(...).compile(...)"
        )


def _plain_steps(model: nn.Module, loss: Loss | None, task: Task | None) -> PlainSteps | None:
    """The steps of a model without its own (``_plain.py``), or None: it has both."""
    name = type(model).__name__
    own = [isinstance(model, protocol) for protocol in (TrainStep, InferenceStep)]
    if all(own):
        if loss is not None or task is not None:
            raise TypeError(
                f"{name} has its own train_step and inference_step, which compute its loss "
                "and output: loss= and task= are for a plain nn.Module; drop them"
            )
        return None
    if any(own):
        missing = "inference_step" if own[0] else "train_step"
        raise TypeError(
            f"model {name} has no {missing}(batch) method: implement it too, or neither "
            "(a plain nn.Module trains with Learner(model, optim, loss=...))"
        )
    if loss is not None and not callable(loss):
        raise TypeError(
            f"loss must be a function of (output, targets), e.g. F.cross_entropy, got "
            f"{type(loss).__name__}"
        )
    return PlainSteps(name, loss, task)


def _given_optimizers(
    optim: OptimizerLike | Mapping[str, OptimizerLike] | None,
) -> dict[str, OptimizerLike]:
    """The optimizers by name (``{"optimizer": optim}`` for one, none for None), checked."""
    if optim is None:
        return {}
    given = dict(optim) if isinstance(optim, Mapping) else {"optimizer": optim}
    if not given:
        raise ValueError(
            "optim must name at least one optimizer, got an empty mapping (None: the model's "
            "optimize updates the parameters itself)"
        )
    for name, value in given.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"optimizer names must be non-empty str, got {name!r}")
        if not isinstance(value, torch.optim.Optimizer) and not callable(value):
            raise TypeError(
                "optim must be a torch.optim.Optimizer, a factory called with the model's "
                f"parameters, or a mapping of names to those, got {type(value).__name__}"
            )
    return given


def _check_optimize(
    model: nn.Module, optims: Mapping[str, OptimizerLike], several: bool, lr_scheduler: object
) -> None:
    """The model's ``optimize`` can step what it is given: its own for several optimizers or
    none; no lr scheduler with several, no torch scheduler without an optimizer."""
    own = _own_optimize(model)
    name = type(model).__name__
    none = not optims
    if none and not own:
        raise TypeError(
            f"Learner({name}) has no optimizer, and {name} has no optimize(self, optim, lr, "
            "grads) of its own to update its parameters: pass one, e.g. Learner(model, "
            "torch.optim.Adam(model.parameters())), or override optimize (it then receives "
            "optim=None)"
        )
    if several and optims and not own:
        raise TypeError(
            f"{name} trains {len(optims)} optimizers ({', '.join(optims)}): "
            "override optimize(self, optimizers, lr, grads) to step them (it receives the "
            "mapping); see docs/training.md, 'Several optimizers'"
        )
    if several and optims and lr_scheduler is not None:
        raise TypeError(
            "with several optimizers each keeps its own lrs: pass no lr_scheduler and step "
            "torch schedulers inside your optimize(...)"
        )
    if none and isinstance(lr_scheduler, torch.optim.lr_scheduler.LRScheduler):
        raise TypeError(
            "a torch lr scheduler drives an optimizer's lrs, and this Learner has none: pass "
            "a float or an ember LrScheduler, whose value your optimize receives as lr"
        )
