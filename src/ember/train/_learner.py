"""The Learner: a model with its optimizer and learning-rate scheduler (Burn's ``Learner``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

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

__all__ = ["Learner", "OptimizerFactory", "OptimizerLike"]

M = TypeVar("M", bound=nn.Module)
OptimizerFactory = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]
OptimizerLike = torch.optim.Optimizer | OptimizerFactory


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
    how). An optimizer whose ``step`` needs a closure (``torch.optim.LBFGS``) also needs the
    model's own ``optimize``, which builds the closure from ``current_step().batch``.
    """

    def __init__(
        self,
        model: M,
        optim: OptimizerLike | Mapping[str, OptimizerLike],
        lr_scheduler: LrScheduler | float | torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        dynamo = sys.modules.get("torch._dynamo")  # loaded once anything was compiled
        if dynamo is not None and isinstance(model, dynamo.eval_frame.OptimizedModule):
            raise TypeError(
                "model is a torch.compile wrapper: ember calls its train_step and "
                "inference_step, which reach the original module uncompiled; pass the module "
                "itself and compile it in place with SupervisedTraining(...).compile(...)"
            )
        for protocol, method in ((TrainStep, "train_step"), (InferenceStep, "inference_step")):
            if not isinstance(model, protocol):
                raise TypeError(
                    f"model {type(model).__name__} has no {method}(batch) method: subclass "
                    "ember.train.LearnerModel and implement train_step and inference_step"
                )
        self._several = isinstance(optim, Mapping)
        given = dict(optim) if isinstance(optim, Mapping) else {"optimizer": optim}
        if not given:
            raise ValueError("optim must name at least one optimizer, got an empty mapping")
        for name, value in given.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"optimizer names must be non-empty str, got {name!r}")
            if not isinstance(value, torch.optim.Optimizer) and not callable(value):
                raise TypeError(
                    "optim must be a torch.optim.Optimizer, a factory called with the model's "
                    f"parameters, or a mapping of names to those, got {type(value).__name__}"
                )
        self._optims: dict[str, OptimizerLike] = given
        self._first = next(iter(given))  # whose param group 0 sets lr_current
        own_optimize = _own_optimize(model)
        if self._several and not own_optimize:
            raise TypeError(
                f"{type(model).__name__} trains {len(given)} optimizers ({', '.join(given)}): "
                "override optimize(self, optimizers, lr, grads) to step them (it receives the "
                "mapping); see docs/training.md, 'Several optimizers'"
            )
        if self._several and lr_scheduler is not None:
            raise TypeError(
                "with several optimizers each keeps its own lrs: pass no lr_scheduler and step "
                "torch schedulers inside your optimize(...)"
            )
        self._check_closures(own_optimize)
        self._model = model
        self._step: TrainStep[Any, Any] = model  # type: ignore[assignment]  # checked above
        self._scheduler = None if lr_scheduler is None else as_scheduler(lr_scheduler)
        self._ratios: list[float] | None = None  # each group's lr over group 0's, as built
        # resolved once: a runtime protocol check costs more than a small model's step
        self._built: dict[str, torch.optim.Optimizer] | None = None
        self._optimizes = isinstance(model, OptimizeStep)
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
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer (built from its factory on first use); see :attr:`optimizers` for a
        Learner with several."""
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
        self._check_closures(_own_optimize(self._model))
        optimizers: dict[str, torch.optim.Optimizer] = self._optims  # type: ignore[assignment]
        self._built = optimizers  # every factory was called above
        return optimizers

    @property
    def several_optimizers(self) -> bool:
        """True when the optimizers came as a mapping."""
        return self._several

    def _check_closures(self, own_optimize: bool) -> None:
        for value in self._optims.values():
            if isinstance(value, torch.optim.LBFGS) and not own_optimize:
                raise TypeError(
                    "torch.optim.LBFGS steps with a closure that recomputes the loss: override "
                    "optimize(self, optim, lr, grads) and call optim.step(closure), the closure "
                    "built from current_step().batch; see docs/training.md, 'Closures'"
                )

    @property
    def lr_scheduler(self) -> LrScheduler | None:
        """The learning-rate scheduler (None: the optimizer's own lrs)."""
        return self._scheduler

    @property
    def optimizer_or_factory(self) -> OptimizerLike | dict[str, OptimizerLike]:
        """The optimizer if it exists, else the factory that will make it (not called here:
        describing a run must not build its optimizer before the model is placed); a mapping
        of them for several optimizers."""
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
        if self._scheduler is not None and not isinstance(self._scheduler, GroupLrScheduler):
            self._group_ratios()  # the groups' lrs as built, before any step writes them

    def train_step(self, batch: Any) -> TrainOutput[Any]:
        """The model's forward and backward pass on ``batch``; the first one's output and batch
        are checked, so a protocol mistake is named with the line to write."""
        if self._first_step:
            output = first_train_step(self._model, self._step, batch)
            self._first_step = False
            return output
        return self._step.train_step(batch)

    def lr_step(self) -> float:
        """Advance the scheduler and write the lrs into the param groups (see the class doc);
        returns param group 0's lr."""
        built = self._built
        groups = (built if built is not None else self.optimizers)[self._first].param_groups
        scheduler = self._scheduler
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

    def optimizer_step(self, grads: GradientsParams) -> None:
        """One optimizer step with ``grads``, through the model's ``optimize`` if it has one."""
        if self._several:
            self._model.optimize(self.optimizers, self._lr_current, grads)  # type: ignore[operator]
        elif self._optimizes:
            self._model.optimize(self.optimizer, self._lr_current, grads)  # type: ignore[operator]
        else:
            default_optimize(self._model, self.optimizer, grads)


def _own_optimize(model: nn.Module) -> bool:
    """Whether ``model`` steps its optimizers itself (not ``LearnerModel``'s default)."""
    return isinstance(model, OptimizeStep) and type(model).optimize is not LearnerModel.optimize
