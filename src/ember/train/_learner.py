"""The Learner: a model with its optimizer and learning-rate scheduler (Burn's ``Learner``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

import torch
from torch import nn

from ember.train._lr_scheduler.base import LrScheduler, as_scheduler
from ember.train._step import (
    GradientsParams,
    InferenceStep,
    OptimizeStep,
    TrainOutput,
    TrainStep,
    default_optimize,
    trained_parameters,
)

__all__ = ["Learner", "OptimizerFactory"]

M = TypeVar("M", bound=nn.Module)
OptimizerFactory = Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]


class Learner(Generic[M]):
    """Holds what training changes: the model, the optimizer and the scheduler.

    ``optim`` is an optimizer built on ``model.parameters()``, or a factory called with the
    parameters once the model is on its training device (the safe choice for optimizers whose
    state must live on that device). ``lr_scheduler`` is an :class:`LrScheduler`, a float
    (a constant lr) or a ``torch.optim.lr_scheduler`` object. Before every optimizer step the
    scheduler's lr is written into every param group, so the scheduler, not the lr the
    optimizer was built with, decides.
    """

    def __init__(
        self,
        model: M,
        optim: torch.optim.Optimizer | OptimizerFactory,
        lr_scheduler: LrScheduler | float | torch.optim.lr_scheduler.LRScheduler,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        for protocol, method in ((TrainStep, "train_step"), (InferenceStep, "inference_step")):
            if not isinstance(model, protocol):
                raise TypeError(
                    f"model {type(model).__name__} has no {method}(batch) method: subclass "
                    "ember.train.LearnerModel and implement train_step and inference_step"
                )
        self._optim: torch.optim.Optimizer | None = None
        self._factory: OptimizerFactory | None = None
        if isinstance(optim, torch.optim.Optimizer):
            self._optim = optim
        elif callable(optim):
            self._factory = optim
        else:
            raise TypeError(
                "optim must be a torch.optim.Optimizer or a factory called with the model's "
                f"parameters, got {type(optim).__name__}"
            )
        self._model = model
        self._step: TrainStep[Any, Any] = model  # type: ignore[assignment]  # checked above
        self._scheduler = as_scheduler(lr_scheduler)
        self._lr_current: float | None = None

    @property
    def model(self) -> M:
        """The model being trained (the same object, not a copy)."""
        return self._model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The optimizer; a factory is called on first use."""
        if self._optim is None:
            assert self._factory is not None
            optim = self._factory(self._model.parameters())
            if not isinstance(optim, torch.optim.Optimizer):
                raise TypeError(
                    f"the optimizer factory returned {type(optim).__name__}, "
                    "not a torch.optim.Optimizer"
                )
            self._optim = optim
        return self._optim

    @property
    def lr_scheduler(self) -> LrScheduler:
        """The learning-rate scheduler."""
        return self._scheduler

    @property
    def lr_current(self) -> float | None:
        """The lr of the last :meth:`lr_step`; None before the first one."""
        return self._lr_current

    def fork(self, device: torch.device | str) -> None:
        """Move the model to ``device``, then build the optimizer if it came as a factory.

        ValueError if the optimizer holds a parameter that is not the model's (an optimizer
        built on another model, or on this one before a copy, would train nothing).
        """
        self._model.to(device)
        names = {id(param): name for name, param in trained_parameters(self._model, refresh=True)}
        for index, group in enumerate(self.optimizer.param_groups):
            for position, param in enumerate(group["params"]):
                if id(param) not in names:
                    raise ValueError(
                        f"the optimizer's parameter {position} of group {index} (shape "
                        f"{tuple(param.shape)}) is not a parameter of the model "
                        f"{type(self._model).__name__}: build the optimizer on "
                        "model.parameters() of the model being trained, or pass a factory"
                    )

    def train_step(self, batch: Any) -> TrainOutput[Any]:
        """The model's forward and backward pass on ``batch``."""
        return self._step.train_step(batch)

    def lr_step(self) -> float:
        """Advance the scheduler and write its lr into every param group."""
        lr = self._scheduler.step()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self._lr_current = lr
        return lr

    def optimizer_step(self, grads: GradientsParams) -> None:
        """One optimizer step with ``grads``, through the model's ``optimize`` if it has one."""
        if isinstance(self._model, OptimizeStep):
            self._model.optimize(self.optimizer, self._lr_current, grads)
        else:
            default_optimize(self._model, self.optimizer, grads)
