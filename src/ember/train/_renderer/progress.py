"""What the metrics thread tells a renderer about progress: the run's start (its metrics, whether
a stop leaves a step checkpoint, and its optimizer steps when ``max_steps`` bounds the run), a
split's start (resumed mid-pass from a mid-round checkpoint) and each batch. The renderer's
optional members are resolved once here, not per batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ember._protocols import member
from ember.train._events import Start, StartSplit, TrainingItem
from ember.train._metric.base import MetricDefinition, metric_definition
from ember.train._metric.registered import MetricsTraining, set_metric_name
from ember.train._renderer.base import MetricsRenderer, Renderer
from ember.train._vocabulary import Split

__all__ = ["ProgressUpdate", "announce_split", "announce_start", "items_progress"]

ProgressUpdate = Callable[[Split, TrainingItem[Any], int], None]
"""Tells the renderer where the run is after a batch of a split, given the items of the
split's validation sets before the batch's (0 but in a run of several)."""


def items_progress(renderer: MetricsRenderer) -> ProgressUpdate:
    """Each batch: the items of its split processed so far (``update_split``)."""

    def update(split: Split, item: TrainingItem[Any], before: int) -> None:
        renderer.update_split(before + item.progress.items_processed)

    return update


def announce_start(
    renderer: MetricsRenderer, event: Start, metrics: MetricsTraining
) -> ProgressUpdate:
    """Every metric's definition (``register_metric``, once per name), ``renderer.start``, and
    ``start_steps`` when steps bound the run and the renderer shows them; returns what each
    batch then tells it (the step too, for a training batch)."""
    definitions: dict[str, MetricDefinition] = {}
    for split in (Split.TRAIN, Split.VALID):
        for metric in metrics.metrics(split):
            definitions.setdefault(metric.name, metric_definition(metric))
    for valid_set in metrics.valid_sets:  # each other validation set's: Loss (noisy)
        for metric in metrics.metrics(Split.VALID):
            definition = metric_definition(metric)
            name = set_metric_name(definition.name, valid_set)
            definitions.setdefault(name, dataclasses.replace(definition, name=name))
    for definition in definitions.values():
        renderer.register_metric(definition)
    renderer.start(event.total_epochs, event.starting_epoch)
    member(renderer, Renderer, "stop_checkpoints")(event.stop_checkpoints)
    if event.total_steps is None:
        return items_progress(renderer)
    member(renderer, Renderer, "start_steps")(event.total_steps, event.starting_step)
    update_step = member(renderer, Renderer, "update_step")

    def update(split: Split, item: TrainingItem[Any], before: int) -> None:
        if split is Split.TRAIN:
            update_step(item.step)
        renderer.update_split(before + item.progress.items_processed)

    return update


def announce_split(renderer: MetricsRenderer, split: Split, event: StartSplit) -> None:
    """``renderer.start_split``, then ``resume_split`` for a split that goes on mid-pass."""
    renderer.start_split(split, event.total_items)
    if event.items_done:
        member(renderer, Renderer, "resume_split")(event.items_done)
