"""Predictions: a model's outputs over a loader, as validation computes them.

``predict(model, loader)`` (an ember loader, or a ``torch.utils.data.DataLoader``) runs
``model.inference_step`` (or ``step(batch)``; a plain module's forward ``model(batch)``,
``model(**batch)`` for a mapping) on every batch with the model in eval mode and each step under
``torch.inference_mode()``, the batches built on the device of the model's first parameter, and
returns the outputs in loader order with their tensors moved to the CPU. ``iter_predictions``
yields each output as it comes, on the model's device (nothing is kept). Both are the inference
pass of validation and the Evaluator (``train/_inference.py``): they equal a hand loop
``model.eval(); with torch.inference_mode(): ...`` bit for bit, and give the model back in the
mode it was in.

With ``strategy=DistributedDataParallel()`` (called on every rank, and consumed to the end on
every rank) each rank runs its share of every global batch and rank 0 gets the global batch's
output, merged in rank order: every item's output exactly once, in loader order; the other ranks
get none. The strategy places the model alone: no ``train_step`` or optimizer is needed.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader as TorchLoader

from ember._protocols import with_defaults
from ember.data import DataLoader
from ember.data._torch_loader import as_ember_loader
from ember.train._inference import inference_pass
from ember.train._outputs import ItemLazy
from ember.train._step import InferenceStep
from ember.train._strategy.base import Step, SupervisedLearningStrategy
from ember.train._strategy.single import SingleDevice

__all__ = ["iter_predictions", "predict", "to_host"]


def iter_predictions(
    model: nn.Module,
    loader: DataLoader[Any] | TorchLoader[Any],
    *,
    step: Step | None = None,
    strategy: SupervisedLearningStrategy | None = None,
) -> Iterator[Any]:
    """Each batch's output, streamed; see the module doc. Arguments are checked at the call."""
    step = _check_step(model, step)
    ember_loader = as_ember_loader(loader, "loader")
    placing = SingleDevice() if strategy is None else strategy
    placing = with_defaults(placing, SupervisedLearningStrategy, "strategy")
    return _predictions(model, ember_loader, step, placing)


def _predictions(
    model: nn.Module, loader: DataLoader[Any], step: Step | None, strategy: Any
) -> Iterator[Any]:
    training = model.training
    run = strategy.start(model, {"predict": loader})
    failure: BaseException | None = None
    try:
        for item, _, _ in inference_pass(run, "predict", step=step):
            yield item.sync() if isinstance(item, ItemLazy) else item
    except GeneratorExit:  # the caller stopped early: nothing failed
        raise
    except BaseException as error:
        failure = error
        raise
    finally:
        model.train(training)
        run.close(failure)


def predict(
    model: nn.Module,
    loader: DataLoader[Any] | TorchLoader[Any],
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


def _check_step(model: nn.Module, step: Step | None) -> Step | None:
    """What runs on a batch: ``step`` (checked callable), None for the model's own
    ``inference_step``, or a plain module's forward (:func:`_forward`)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if step is not None:
        if not callable(step):
            raise TypeError(f"step must be callable with a batch, got {type(step).__name__}")
        return step
    if isinstance(model, InferenceStep):
        return None
    return functools.partial(_forward, model)


def _forward(model: nn.Module, batch: Any) -> Any:
    """A plain module's output on ``batch``: ``model(batch)``, ``model(**batch)`` for a
    mapping; any other batch is named with the fix."""
    if isinstance(batch, torch.Tensor):
        return model(batch)
    if isinstance(batch, Mapping):
        return model(**batch)
    raise TypeError(
        f"model {type(model).__name__} has no inference_step(batch), and a batch of "
        f"{type(batch).__name__} is neither a tensor nor a mapping to call it with: give "
        "step=learner.inference_step (the Learner's, for a model trained with a loss) or "
        "step=lambda batch: model(batch.x)"
    )
