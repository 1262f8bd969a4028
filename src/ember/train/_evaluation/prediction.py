"""Predictions: a model's outputs over a loader, as validation computes them.

``predict(model, loader)`` runs ``model.inference_step`` (or ``step(batch)``) on every batch with
the model in eval mode and each step under ``torch.inference_mode()``, the batches built on the
device of the model's first parameter, and returns the outputs in loader order with their tensors
moved to the CPU. ``iter_predictions`` yields each output as it comes, on the model's device
(nothing is kept). Both equal a hand loop ``model.eval(); with torch.inference_mode(): ...`` bit
for bit, and give the model back in the mode it was in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ember._checks import check_protocol
from ember.data import DataLoader
from ember.train._step import InferenceStep

__all__ = ["iter_predictions", "predict", "to_host"]

Step = Callable[[Any], Any]


def iter_predictions(
    model: nn.Module, loader: DataLoader[Any], *, step: Step | None = None
) -> Iterator[Any]:
    """Each batch's output, streamed; see the module doc. Arguments are checked at the call."""
    run = _step(model, step)
    check_protocol(loader, DataLoader, "loader")
    return _outputs(model, loader, run)


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


def predict(model: nn.Module, loader: DataLoader[Any], *, step: Step | None = None) -> list[Any]:
    """Every batch's output in loader order, its tensors on the CPU; see the module doc."""
    return [to_host(output) for output in iter_predictions(model, loader, step=step)]


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
