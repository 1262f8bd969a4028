"""Training on one device (Burn's single-device strategy)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ember._device import available_device
from ember.data import DataLoader, Progress
from ember.train._learner import Learner
from ember.train._precision import Precision
from ember.train._step import TrainOutput
from ember.train._strategy.base import LocalRun, add_gradients, model_device, with_progress

__all__ = ["SingleDevice", "SingleDeviceRun"]


class SingleDevice:
    """Trains and validates on ``device`` (default: where the model's first parameter is); a
    device this machine does not have (``"cuda:0"`` on a CPU build) is refused here."""

    is_main = True

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = None if device is None else available_device(device, "SingleDevice's device")

    def __repr__(self) -> str:
        return f"SingleDevice({self.device})"

    def start(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> SingleDeviceRun:
        """Move the model and the loaders to the device."""
        device = self.device or model_device(model)
        model.to(device)
        return SingleDeviceRun(
            model, {name: loader.to_device(device) for name, loader in loaders.items()}
        )

    def check(self, learner: Learner[Any]) -> None:
        """Any learner trains on one device."""

    def use_precision(self, precision: Precision) -> None:
        """Autocast is the loop's: nothing to prepare."""


class SingleDeviceRun(LocalRun):
    """One model, one device: each unit of work is one batch."""

    def __init__(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> None:
        self._model = model
        self.replicas = (model,)
        self.loaders = dict(loaders)

    def train_pass(self) -> Iterator[tuple[Any, Progress]]:
        """The train loader's batches."""
        return with_progress(self.loaders["train"])

    def train_step(self, learner: Learner[Any], batch: Any) -> Sequence[TrainOutput[Any]]:
        """The model's ``train_step``; gradients it computed elsewhere are added to ``.grad``."""
        output = learner.train_step(batch)
        add_gradients(self._model, output.grads)
        return (output,)
