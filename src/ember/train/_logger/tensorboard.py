"""Metric values as TensorBoard scalars, written by ``torch.utils.tensorboard``.

Needs the ``ember[tensorboard]`` extra, imported only when a logger is created.

::

    SupervisedTraining(...).with_metric_logger(TensorBoardLogger("runs/mnist"))

Scalars are named and placed as :func:`~ember.train._logger.base.tracker_points` says: the
training batches at the run's global step (its optimizer steps so far, which go on across a
resume: a resumed run's points follow the earlier ones, never on top of them) under
``train/{name}``, the validation epoch value at the step it followed under ``valid/{name}``, and
every epoch value at step = epoch under ``{split}/{name}/epoch``.

The run's configuration is the text ``config``. Metrics that log text are not written.

The logger only writes: the file logs the builder keeps beside it serve checkpointing, early
stopping and the summary.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.train._metric.values import MetricValue, tracker_points
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["TensorBoardLogger"]


def _summary_writer(log_dir: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:  # torch raises this when the tensorboard package is missing
        raise ImportError(
            "TensorBoardLogger needs the tensorboard package: pip install ember[tensorboard]"
        ) from error
    return SummaryWriter(log_dir=str(log_dir))


class TensorBoardLogger:
    """Writes numeric metric entries as TensorBoard scalars under ``log_dir``.

    The event file is created at construction; :meth:`end_split` flushes it, :meth:`close`
    flushes and closes it. See the module docstring for the tags and steps.
    """

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = Path(log_dir)
        if self.log_dir.exists() and not self.log_dir.is_dir():
            raise ValueError(f"log_dir is a file, not a directory: {str(self.log_dir)!r}")
        self._writer: Any = _summary_writer(self.log_dir)

    def start(self, config: Mapping[str, Any]) -> None:
        """Write the configuration as the ``config`` text (JSON)."""
        self._writer.add_text("config", json.dumps(config, indent=2, sort_keys=True))

    def log(self, values: Sequence[MetricValue]) -> None:
        """Write the scalars of one batch, or of the epoch values (see the module docstring)."""
        for value in values:
            for tag, step in tracker_points(value):
                self._writer.add_scalar(tag, value.value, step)

    def end_split(self, epoch: int, split: Split) -> None:
        """Flush the event file."""
        self._writer.flush()

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Nothing more to write: the summary is in the scalars already."""

    def close(self) -> None:
        """Flush and close the event file; calling it again does nothing."""
        self._writer.close()
