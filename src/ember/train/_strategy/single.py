"""Training on one device (Burn's single-device strategy)."""

from __future__ import annotations

from typing import Any

import torch

from ember.data import DataLoader
from ember.train._epoch import train_epoch, valid_epoch
from ember.train._gradient_checkpointing import checkpointed
from ember.train._learner import Learner
from ember.train._strategy.base import FitResult, TrainingComponents, resume, run_epochs

__all__ = ["SingleDevice", "model_device"]


def model_device(learner: Learner[Any]) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    param = next(learner.model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


class SingleDevice:
    """Trains and validates on ``device`` (default: where the model's first parameter is)."""

    def __init__(self, device: torch.device | str | None = None) -> None:
        self.device = torch.device(device) if device is not None else None

    def __repr__(self) -> str:
        return f"SingleDevice({self.device})"

    def fit(
        self,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        """The epoch loop of reference §2.1, with ember's stop rules."""
        device = self.device or model_device(learner)
        train = train.to_device(device)
        valid = valid.to_device(device)
        learner.fork(device)
        loaders = {"train": train, "valid": valid}
        resume(components, learner, loaders, starting_epoch)
        processor, interrupter = components.processor, components.interrupter

        def train_split(epoch: int) -> None:
            train_epoch(learner, train, processor, interrupter, components.grads_accumulation)

        def valid_split(epoch: int) -> None:
            valid_epoch(learner.model, valid, processor, interrupter)

        with checkpointed(components.gradient_checkpointing, learner.model):
            return run_epochs(
                components, learner, loaders, starting_epoch, train_split, valid_split
            )
