"""One pass over a loader: the training split and the validation split of an epoch."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ember.data import DataLoader
from ember.train._events import ProcessedItem, TrainingItem
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._processor import EventProcessor
from ember.train._step import GradientsAccumulator

__all__ = ["train_epoch", "valid_epoch"]


def train_epoch(
    learner: Learner[Any],
    loader: DataLoader[Any],
    processor: EventProcessor,
    interrupter: Interrupter,
    grads_accumulation: int | None = None,
) -> None:
    """Train on every batch of ``loader`` (the split's events are sent by the caller).

    Per batch: ``train_step`` → ``lr_step`` → ``optimizer_step`` → a ``ProcessedItem`` event.
    With ``grads_accumulation`` n, gradients are summed and the scheduler and optimizer run once
    per n batches, and once more for a partial window when the epoch ends naturally (an
    interrupted epoch leaves its partial window unapplied). An event's ``lr`` is the lr of the
    last optimizer step taken at that point (None before the first one).

    Nothing here reads a tensor back to the host: the metrics thread does.
    """
    learner.model.train()
    accumulator = GradientsAccumulator() if grads_accumulation is not None else None
    window = 0
    iterator = iter(loader)
    for iteration, batch in enumerate(iterator, start=1):
        progress = iterator.progress()
        output = learner.train_step(batch)
        if accumulator is None:
            learner.lr_step()
            learner.optimizer_step(output.grads)
        else:
            accumulator.accumulate(output.grads)
            window += 1
            if window == grads_accumulation or progress.is_completed:
                learner.lr_step()
                learner.optimizer_step(accumulator.grads())
                window = 0
        processor.process_train(
            ProcessedItem(TrainingItem(output.item, progress, iteration, learner.lr_current))
        )
        if interrupter.should_stop():
            break


def valid_epoch(
    model: nn.Module,
    loader: DataLoader[Any],
    processor: EventProcessor,
    interrupter: Interrupter,
) -> None:
    """Run ``inference_step`` on every batch in eval mode, without an autograd graph."""
    model.eval()
    with torch.inference_mode():
        iterator = iter(loader)
        for iteration, batch in enumerate(iterator, start=1):
            progress = iterator.progress()
            output = model.inference_step(batch)  # type: ignore[operator]  # checked by Learner
            processor.process_valid(ProcessedItem(TrainingItem(output, progress, iteration, None)))
            if interrupter.should_stop():
                break
