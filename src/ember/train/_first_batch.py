"""The first training batch of a run: protocol mistakes turned into messages that say what to write.

A new user's first ``train_step`` often returns the wrong thing (the model's output object, or
the loss as Lightning's ``training_step`` does), or gets a batch on another device than the
model. Left alone, these surface deep inside ember (``'Tensor' object has no attribute
'grads'``) or inside torch. The Learner runs its first ``train_step`` through
:func:`first_train_step`, which says what was returned, what is expected and the line to write;
every later step calls the model directly, so the checks cost nothing per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ember.train._step import TrainOutput

__all__ = ["check_train_output", "first_train_step"]

_FROM_LOSS = "TrainOutput.from_loss(self, loss, output)"


def first_train_step(model: nn.Module, step: Callable[[Any], Any], batch: Any) -> TrainOutput[Any]:
    """``step(batch)`` (``model``'s train step), with its output checked and a device mismatch
    between the batch and the model named (ValueError, chained to torch's error)."""
    try:
        output = step(batch)
    except RuntimeError as error:
        mismatch = _device_mismatch(model, batch)
        if mismatch is None:
            raise
        raise ValueError(mismatch) from error
    return check_train_output(output, model)


def check_train_output(output: Any, model: nn.Module) -> TrainOutput[Any]:
    """``output`` if it is a :class:`TrainOutput`, else TypeError saying what ``train_step``
    returned and the line that returns a TrainOutput."""
    if isinstance(output, TrainOutput):
        return output
    name = type(model).__name__
    if isinstance(output, torch.Tensor):
        raise TypeError(
            f"{name}.train_step returned a Tensor of shape {tuple(output.shape)} (the loss?), "
            "not a TrainOutput: ember runs the backward pass and the optimizer itself, and "
            "the metrics need the step's output, so end train_step with "
            f"`return {_FROM_LOSS}` (output: what the metrics read, e.g. "
            "RegressionOutput(loss, predictions, targets))"
        )
    loss = "output.loss" if hasattr(output, "loss") else "loss"
    raise TypeError(
        f"{name}.train_step returned {type(output).__name__}, not a TrainOutput: wrap it, "
        f"running the backward pass: `return TrainOutput.from_loss(self, {loss}, output)`"
    )


def _device_mismatch(model: nn.Module, batch: Any) -> str | None:
    """The message for a batch whose tensors are not on the model's device, or None."""
    model_devices = {param.device for param in model.parameters()}
    if len(model_devices) != 1:
        return None  # no parameters, or a model spread over devices on purpose
    (device,) = model_devices
    elsewhere = sorted(str(d) for d in _tensor_devices(batch) if d != device)
    if not elsewhere:
        return None
    return (
        f"the batch has tensors on {', '.join(elsewhere)} but the model "
        f"{type(model).__name__} is on {device}: the loader is moved to the training device "
        "and asks the batcher for batches there, so make the batcher put every tensor on the "
        "device it is given (batch(items, device): e.g. torch.stack(xs).to(device)), or "
        "move the batch in train_step (batch.to(device))"
    )


def _tensor_devices(batch: Any) -> set[torch.device]:
    """The devices of the tensors in ``batch`` (tuples, lists, mappings, dataclasses)."""
    if isinstance(batch, torch.Tensor):
        return {batch.device}
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        values: Any = [getattr(batch, field.name) for field in dataclasses.fields(batch)]
    elif isinstance(batch, Mapping):
        values = batch.values()
    elif isinstance(batch, list | tuple):
        values = batch
    else:
        return set()
    devices: set[torch.device] = set()
    for value in values:
        devices |= _tensor_devices(value)
    return devices
