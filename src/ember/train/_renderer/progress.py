"""What the metrics thread tells a renderer about progress: the run's start (its metrics, whether
a stop leaves a step checkpoint, and its optimizer steps when ``max_steps`` bounds the run), a
split's start (resumed mid-pass from a mid-round checkpoint) and each batch. The optional
protocols are checked once here, not per batch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ember.train._events import Start, StartSplit, TrainingItem
from ember.train._metric.base import MetricDefinition, metric_definition
from ember.train._metric.registered import MetricsTraining
from ember.train._renderer.base import (
    MetricsRenderer,
    ResumedSplitLogger,
    StepProgressLogger,
    StopCheckpointLogger,
    TrainingProgressLogger,
)
from ember.train._vocabulary import Split

__all__ = ["ProgressUpdate", "announce_split", "announce_start", "items_progress"]

ProgressUpdate = Callable[[Split, TrainingItem[Any]], None]
"""Tells the renderer where the run is after a batch of a split."""


def items_progress(renderer: TrainingProgressLogger) -> ProgressUpdate:
    """Each batch: the items of its split processed so far (``update_split``)."""

    def update(split: Split, item: TrainingItem[Any]) -> None:
        renderer.update_split(item.progress.items_processed)

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
    for definition in definitions.values():
        renderer.register_metric(definition)
    renderer.start(event.total_epochs, event.starting_epoch)
    if isinstance(renderer, StopCheckpointLogger):
        renderer.stop_checkpoints(event.stop_checkpoints)
    if event.total_steps is None or not isinstance(renderer, StepProgressLogger):
        return items_progress(renderer)
    renderer.start_steps(event.total_steps, event.starting_step)
    steps: StepProgressLogger = renderer

    def update(split: Split, item: TrainingItem[Any]) -> None:
        if split is Split.TRAIN:
            steps.update_step(item.step)
        renderer.update_split(item.progress.items_processed)

    return update


def announce_split(renderer: TrainingProgressLogger, split: Split, event: StartSplit) -> None:
    """``renderer.start_split``, then ``resume_split`` for a split that goes on mid-pass."""
    renderer.start_split(split, event.total_items)
    if event.items_done and isinstance(renderer, ResumedSplitLogger):
        renderer.resume_split(event.items_done)
