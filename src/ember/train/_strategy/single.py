"""Training on one device (Burn's single-device strategy)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from ember.data import DataLoader, Progress
from ember.data._device import available_device
from ember.train._learner import Learner
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

    def start(
        self, learner: Learner[Any], train: DataLoader[Any], valid: DataLoader[Any]
    ) -> SingleDeviceRun:
        """Move the model, then build the optimizer if it came as a factory; move the loaders."""
        device = self.device or model_device(learner)
        learner.fork(device)
        return SingleDeviceRun(learner, train.to_device(device), valid.to_device(device))


class SingleDeviceRun(LocalRun):
    """One model, one device: each unit of work is one batch."""

    def __init__(
        self, learner: Learner[Any], train: DataLoader[Any], valid: DataLoader[Any]
    ) -> None:
        self._model = learner.model
        self._train = train
        self._valid = valid
        self.replicas = (learner.model,)
        self.loaders = {"train": train, "valid": valid}

    def train_pass(self) -> Iterator[tuple[Any, Progress]]:
        """The train loader's batches."""
        return with_progress(self._train)

    def train_step(self, learner: Learner[Any], batch: Any) -> Sequence[TrainOutput[Any]]:
        """The model's ``train_step``; gradients it computed elsewhere are added to ``.grad``."""
        output = learner.train_step(batch)
        add_gradients(self._model, output.grads)
        return (output,)

    def valid_pass(self) -> Iterator[tuple[Any, Progress]]:
        """The valid loader's batches."""
        return with_progress(self._valid)

    def inference_step(self, batch: Any) -> Any:
        """The model's ``inference_step``."""
        return self._model.inference_step(batch)
