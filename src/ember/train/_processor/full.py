"""Event processing: metrics, logs and rendering (Burn's ``FullEventProcessorTraining``).

:class:`FullEventProcessorTraining` turns chunks of events into metric values, log lines and
renderer calls; :class:`~ember.train._processor.asynchronous.AsyncProcessorTraining` decides on
which thread and when. The items of a chunk are processed a run of one split at a time: their
losses read back together, their values handed to each logger in one call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import torch

from ember._errors import NonFiniteLossError
from ember.train._events import (
    End,
    EndEpoch,
    EndSplit,
    LearnerEvent,
    ProcessedItem,
    Start,
    StartSplit,
)
from ember.train._logger.store import EventStore
from ember.train._metric.base import MetricMetadata, adapt
from ember.train._metric.loss import LossInput
from ember.train._metric.registered import MetricsTraining
from ember.train._metric.values import MetricState
from ember.train._outputs import synced
from ember.train._processor.base import Event
from ember.train._renderer.base import MetricsRenderer
from ember.train._renderer.progress import announce_split, announce_start, items_progress
from ember.train._vocabulary import Split

__all__ = ["FullEventProcessorTraining"]

log = logging.getLogger("ember.train")


def _host_values(tensors: Sequence[torch.Tensor]) -> list[float]:
    """The values of one-element tensors, read with as few GIL releases as possible.

    ``tolist()`` of a CPU tensor never gives up the GIL, while every other torch call does,
    and a metrics thread that gives up the GIL must wait for the training thread to give it
    back, which a small model's training thread does only between two of its many tiny ops
    (in the measured case ``.item()`` took 30 µs instead of 0.1). Tensors elsewhere are
    stacked and read in one go: a single device synchronisation for the chunk.
    """
    if all(t.is_cpu for t in tensors):
        return [_number(t.tolist()) for t in tensors]
    if any(t.dim() != tensors[0].dim() for t in tensors):
        tensors = [t.reshape(()) for t in tensors]
    return [_number(v) for v in torch.stack(list(tensors)).flatten().tolist()]


def _number(value: Any) -> float:
    """The single number in a nested list (``tolist()`` of a one-element tensor)."""
    while isinstance(value, list):
        (value,) = value
    return value if type(value) is float else float(value)


def _same_run(entry: tuple[Split, Event], split: Split, valid_set: str | None) -> bool:
    """Whether ``entry`` is an item of ``split`` and of the validation set ``valid_set``."""
    event = entry[1]
    return type(event) is ProcessedItem and entry[0] is split and event.valid_set == valid_set


class FullEventProcessorTraining:
    """Computes metrics, logs them through the event store and drives the renderer."""

    def __init__(self, metrics: MetricsTraining, renderer: MetricsRenderer, store: EventStore):
        self.metrics = metrics
        self.renderer = renderer
        self.store = store
        self._epoch = 0
        self.split_epoch: int | None = None
        """The epoch of the split under way, from its ``StartSplit`` until its ``EndSplit`` is
        processed; None between splits. After a failure: the epoch whose split it ended."""
        # per split: (epoch, iteration) of the first and of the last item since the last line
        self._iterations: dict[Split, tuple[int, int, int, int]] = {}
        # per split: the first and the last epoch started since the last line
        self._started: dict[Split, tuple[int, int]] = {}
        self._without_loss: set[type[Any]] = set()
        self._step = 0  # the run's optimizer steps at the last item: the loggers' global step
        self._show_progress = items_progress(renderer)  # in steps too once Start says so
        # the validation set under way, the items of the split's sets before it, and its own
        self._set: str | None = None
        self._items_before = self._set_items = 0

    def process_train(self, event: LearnerEvent) -> None:
        """Handle an event of the training split."""
        self.process_chunk([(Split.TRAIN, event)])

    def process_valid(self, event: LearnerEvent) -> None:
        """Handle an event of the validation split."""
        self.process_chunk([(Split.VALID, event)])

    def process_chunk(self, chunk: Sequence[tuple[Split, Event]]) -> None:
        """Handle events in order (``docs/design.md``, "The metrics thread"): each run of
        consecutive items of one split together, their losses read back at once (see
        ``_host_values``), their values handed to each logger in one call."""
        start, count = 0, len(chunk)
        while start < count:
            split, event = chunk[start]
            if type(event) is not ProcessedItem:
                self._process_event(split, event)
                start += 1
                continue
            valid_set = event.valid_set
            end = start + 1
            while end < count and _same_run(chunk[end], split, valid_set):
                end += 1
            self._process_items(split, [e.item for _, e in chunk[start:end]], valid_set)  # type: ignore[union-attr]  # ProcessedItem
            start = end

    def _process_items(
        self, split: Split, training_items: Sequence[Any], valid_set: str | None = None
    ) -> None:
        """Update the metrics (of the validation set ``valid_set``, when given) with
        consecutive items of ``split`` and render each; their values reach the loggers
        together, also those before an item that fails (a non-finite loss)."""
        items = [synced(training_item.item) for training_item in training_items]
        losses = self._read_losses(items)
        update, renderer, progress = self.metrics.update, self.renderer, self._show_progress
        show = renderer.update_train if split is Split.TRAIN else renderer.update_valid
        before = self._sets_before(valid_set)
        checked = split is Split.TRAIN
        logged: list[tuple[Sequence[MetricState], int]] = []
        try:
            for training_item, item, loss in zip(training_items, items, losses, strict=True):
                if checked and loss is not None:
                    loss = self._checked(loss, training_item.iteration)
                metadata = MetricMetadata(
                    training_item.progress, training_item.iteration, training_item.lr,
                    training_item.grad_norm, training_item.values,
                    None if loss is None else loss.items,
                )  # fmt: skip
                states = update(split, item, metadata, loss, valid_set)
                if states:
                    logged.append((states, training_item.step))
                    for state in states:
                        show(state)
                progress(split, training_item, before)
        finally:
            if logged:
                self.store.log_many(split, logged)
        # the run's last item says where the split is (a failed item ends the processing)
        last = training_items[-1]
        self._step = last.step
        self._set_items = last.progress.items_processed
        self._count_iterations(split, training_items[0].iteration, last.iteration)

    def _sets_before(self, valid_set: str | None) -> int:
        """The items of the split's validation sets before ``valid_set`` (each set's progress
        counts its own items; the renderer is shown the split's)."""
        if valid_set != self._set:  # the next set begins: the one before it is over
            self._set, self._items_before = valid_set, self._items_before + self._set_items
            self._set_items = 0
        return self._items_before

    def _count_iterations(self, split: Split, first: int, last: int) -> None:
        """Remember the first and the last iteration processed since the last progress line,
        after items from iteration ``first`` to ``last``."""
        span = self._iterations.get(split)
        start = (self._epoch, first) if span is None else span[:2]
        self._iterations[split] = (*start, self._epoch, last)

    def _checked(self, loss: LossInput, iteration: int) -> LossInput:
        """The training loss, refused when it is not finite (no checkpoint is written then)."""
        value = loss.host_value()
        if loss.value is None:  # a per-sample loss: its mean, once for the check and the metric
            loss = LossInput(loss.tensor, value, loss.summed_over, loss.items)
        if not math.isfinite(value):
            raise NonFiniteLossError(
                f"the training loss is not finite at epoch {self._epoch}, iteration "
                f"{iteration} ({value}); training stopped and no checkpoint was "
                "written from these weights"
            )
        return loss

    def _process_event(self, split: Split, event: Event) -> None:
        renderer = self.renderer
        if isinstance(event, StartSplit):
            self._epoch = self.split_epoch = event.epoch
            self._set, self._items_before, self._set_items = None, 0, 0
            started = self._started.get(split)
            self._started[split] = (event.epoch if started is None else started[0], event.epoch)
            self.store.start_split(split, event.epoch)
            announce_split(renderer, split, event)
        elif isinstance(event, EndSplit):
            self._publish(split, self.metrics.end_epoch(split))
            self.store.end_split(split)
            renderer.end_split()
            self.split_epoch = None
        elif isinstance(event, EndEpoch):
            renderer.update_epoch(event.epoch)
        elif isinstance(event, Start):
            # a resumed split that logs no item (its training was over) ends at the resume's
            # step, not at 0: its epoch values are logged there
            self._step = event.starting_step
            self._show_progress = announce_start(renderer, event, self.metrics)
        elif isinstance(event, End):
            renderer.end()
            renderer.on_train_end(event.summary)

    def _read_losses(self, items: Sequence[Any]) -> list[LossInput | None]:
        """The loss of every item that has one, one-element ones read to the host together
        ("finite only" checks them)."""
        losses: list[LossInput | None] = []
        scalars: list[torch.Tensor] = []
        without = self._without_loss
        for item in items:
            loss = None
            if type(item) not in without:
                try:
                    loss = adapt(item, LossInput)
                except TypeError:
                    without.add(type(item))  # an output without a loss
                else:
                    if loss.tensor.numel() == 1:
                        scalars.append(loss.tensor)
            losses.append(loss)
        if not scalars:
            return losses
        values = iter(_host_values(scalars))
        return [
            LossInput(loss.tensor, next(values), loss.summed_over, loss.items)
            if loss is not None and loss.tensor.numel() == 1
            else loss
            for loss in losses
        ]

    def log_progress(self) -> None:
        """Write the epochs started and the iterations processed since the last call to the
        application log: per split, one line for the epochs and one for the iterations.

        Called once per chunk of events (at most ~20 times a second), not once per epoch and
        iteration as Burn does: a fast model would otherwise write megabytes of lines a
        minute, and a log record costs a small model's step a few percent.
        """
        for split in (Split.TRAIN, Split.VALID):
            started = self._started.pop(split, None)
            if started is not None:
                name = "training" if split is Split.TRAIN else "validation"
                if started[0] == started[1]:
                    log.info("Executing %s step for epoch %d", name, started[0])
                else:
                    log.info("Executing %s steps for epochs %d-%d", name, *started)
            span = self._iterations.pop(split, None)
            if span is None:
                continue
            first_epoch, first, epoch, last = span
            if first_epoch == epoch:
                log.info("Iterations %d-%d of epoch %d (%s)", first, last, epoch, split.value)
            else:
                log.info(
                    "Iterations from epoch %d iteration %d to epoch %d iteration %d (%s)",
                    *(first_epoch, first, epoch, last, split.value),
                )

    def _publish(self, split: Split, states: Sequence[MetricState]) -> None:
        if not states:
            return
        self.store.log(split, states, self._step)
        update = self.renderer.update_train if split is Split.TRAIN else self.renderer.update_valid
        for state in states:
            update(state)
