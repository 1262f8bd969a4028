"""Renderers: how training is shown to a person."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TextIO

from ember.train.renderer.base import (
    MetricsRenderer,
    MetricsRendererTraining,
    MetricState,
    TrainingProgressLogger,
)
from ember.train.renderer.cli import CliMetricsRenderer

if TYPE_CHECKING:
    from ember.train.interrupter import Interrupter

__all__ = [
    "CliMetricsRenderer",
    "MetricState",
    "MetricsRenderer",
    "MetricsRendererTraining",
    "TrainingProgressLogger",
    "default_renderer",
]


def default_renderer(
    interrupter: Interrupter | None = None, stream: TextIO | None = None
) -> MetricsRenderer:
    """The renderer used when none is given: the CLI renderer on ``stream`` (stdout).

    ``interrupter`` is what an interactive renderer stops training through.
    """
    return CliMetricsRenderer(stream if stream is not None else sys.stdout)
