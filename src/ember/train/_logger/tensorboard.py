"""Metric values as TensorBoard scalars, written by ``torch.utils.tensorboard``.

Needs the ``ember[tensorboard]`` extra, imported only when a logger is created.

::

    logger = TensorBoardLogger("runs/mnist")
    SupervisedTraining(...).with_metric_logger(FileMetricLogger(dir)).with_metric_logger(logger)

Each batch value of a numeric metric becomes the scalar ``{split}/{name}`` at a step that counts
the batches of that split across epochs (1, 2, 3, ...); each epoch value becomes
``{split}/{name}/epoch`` at step = epoch. Non-numeric metrics are not written.

The logger is write-only: :meth:`TensorBoardLogger.read_numeric` answers ``[]``, so the event
store asks the next logger. Checkpointing strategies, early stopping and the summary need one
that reads back, so keep a :class:`~ember.train._logger.file.FileMetricLogger` (or an
:class:`~ember.train._logger.memory.InMemoryMetricLogger` or a
:class:`~ember.train._logger.csv.CsvMetricLogger`) alongside it: once any logger is given, the
builder adds no file logger of its own.

After a resume the batch steps count from 1 again (the logger does not know how many batches
earlier runs had); the epoch scalars keep their real epoch numbers.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember.train._metric.base import MetricDefinition, MetricEntry, NumericEntry
from ember.train._vocabulary import Split

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
        self._steps: dict[Split, int] = dict.fromkeys(Split, 0)
        self._not_numeric: set[str] = set()

    def log_definition(self, definition: MetricDefinition) -> None:
        """Remember metrics that are not numeric: their entries are skipped."""
        if not definition.is_numeric:
            self._not_numeric.add(definition.name)

    def log(self, entries: Sequence[MetricEntry], epoch: int, split: Split) -> None:
        """Write the batch values at the split's next step, or the epoch values at ``epoch``."""
        values: list[tuple[str, NumericEntry]] = []
        for entry in entries:
            if entry.name in self._not_numeric or not entry.is_available:
                continue
            try:
                values.append((entry.name, NumericEntry.parse(entry.serialized)))
            except ValueError:  # a metric without a definition that logs text
                continue
        if not values:
            return
        # the split-end call carries the epoch values; every other call is one batch
        if any(value.final for _, value in values):
            for name, value in values:
                self._writer.add_scalar(f"{split.value}/{name}/epoch", value.value, epoch)
            return
        self._steps[split] += 1
        step = self._steps[split]
        for name, value in values:
            self._writer.add_scalar(f"{split.value}/{name}", value.value, step)

    def end_split(self, epoch: int, split: Split) -> None:
        """Flush the event file."""
        self._writer.flush()

    def read_numeric(self, name: str, epoch: int, split: Split) -> list[NumericEntry]:
        """Always ``[]``: TensorBoard event files are not read back (see the module docstring)."""
        return []

    def close(self) -> None:
        """Flush and close the event file; calling it again does nothing."""
        self._writer.close()
