"""Predictions: a model's outputs over a loader, as validation computes them.

``predict(model, loader)`` runs ``model.inference_step`` (or ``step(batch)``) on every batch with
the model in eval mode and each step under ``torch.inference_mode()``, the batches built on the
device of the model's first parameter, and returns the outputs in loader order with their tensors
moved to the CPU. ``iter_predictions`` yields each output as it comes, on the model's device
(nothing is kept). Both equal a hand loop ``model.eval(); with torch.inference_mode(): ...`` bit
for bit, and give the model back in the mode it was in.

With ``strategy=DistributedDataParallel()`` (called on every rank, and consumed to the end on
every rank) each rank runs its share of every global batch and rank 0 gets the global batch's
output, merged in rank order: every item's output exactly once, in loader order; the other ranks
get none. The strategies place a model through a ``Learner``, so the model then needs a
``train_step`` too (any ``LearnerModel`` has one).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ember._protocols import check_protocol
from ember.data import DataLoader
from ember.train._learner import Learner
from ember.train._outputs import ItemLazy
from ember.train._step import InferenceStep
from ember.train._strategy.base import SupervisedLearningStrategy

__all__ = ["inference_learner", "iter_predictions", "predict", "to_host"]

Step = Callable[[Any], Any]


def iter_predictions(
    model: nn.Module,
    loader: DataLoader[Any],
    *,
    step: Step | None = None,
    strategy: SupervisedLearningStrategy | None = None,
) -> Iterator[Any]:
    """Each batch's output, streamed; see the module doc. Arguments are checked at the call."""
    run = _step(model, step)
    check_protocol(loader, DataLoader, "loader")
    if strategy is None:
        return _outputs(model, loader, run)
    check_protocol(strategy, SupervisedLearningStrategy, "strategy")
    learner = inference_learner(model)  # checks the model before anything runs
    return _placed_outputs(learner, loader, run, strategy)


def inference_learner(model: nn.Module) -> Learner[Any]:
    """A Learner for a model that only runs forward (strategies place models through one); its
    optimizer is never stepped."""
    return Learner(model, _unused_optimizer, 0.0)


def _unused_optimizer(params: Any) -> torch.optim.Optimizer:
    """A model without parameters gets a placeholder one."""
    return torch.optim.SGD(list(params) or [nn.Parameter(torch.zeros(0))], lr=0.0)


def _placed_outputs(
    learner: Learner[Any], loader: DataLoader[Any], run: Step, strategy: SupervisedLearningStrategy
) -> Iterator[Any]:
    model = learner.model
    training = model.training
    placed = strategy.start(learner, loader, loader)
    failure: BaseException | None = None
    try:
        for batch, _ in placed.valid_pass():
            model.eval()
            with torch.inference_mode():
                output = run(batch) if batch is not None else None  # None: an empty DDP share
                items, _ = placed.report([] if output is None else [output], False)
                items = [item.sync() if isinstance(item, ItemLazy) else item for item in items]
            yield from items
    except GeneratorExit:  # the caller stopped early: nothing failed
        raise
    except BaseException as error:
        failure = error
        raise
    finally:
        model.train(training)
        placed.close(failure)


def _outputs(model: nn.Module, loader: DataLoader[Any], run: Step) -> Iterator[Any]:
    param = next(model.parameters(), None)
    batches = loader if param is None else loader.to_device(param.device)
    training = model.training
    try:
        for batch in batches:
            model.eval()  # again after each yield: the caller may have changed it meanwhile
            with torch.inference_mode():
                output = run(batch)
            yield output
    finally:
        model.train(training)
        if batches is not loader:
            batches.close()


def predict(
    model: nn.Module,
    loader: DataLoader[Any],
    *,
    step: Step | None = None,
    strategy: SupervisedLearningStrategy | None = None,
) -> list[Any]:
    """Every batch's output in loader order, its tensors on the CPU; see the module doc."""
    outputs = iter_predictions(model, loader, step=step, strategy=strategy)
    return [to_host(output) for output in outputs]


def to_host(value: Any) -> Any:
    """``value`` with every tensor in it (also in dataclass fields, plain tuples, lists and
    dicts) moved to the CPU; other values as they are."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        moved = {
            field.name: to_host(getattr(value, field.name))
            for field in dataclasses.fields(value)
            if field.init
        }
        return dataclasses.replace(value, **moved)
    if type(value) in (tuple, list):
        return type(value)(to_host(item) for item in value)
    if type(value) is dict:
        return {key: to_host(item) for key, item in value.items()}
    return value


def _step(model: nn.Module, step: Step | None) -> Step:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if step is not None:
        if not callable(step):
            raise TypeError(f"step must be callable with a batch, got {type(step).__name__}")
        return step
    if not isinstance(model, InferenceStep):
        raise TypeError(
            f"model {type(model).__name__} has no inference_step(batch) method: give "
            "step=lambda batch: ... (e.g. the model's forward on the batch's inputs)"
        )
    return model.inference_step
