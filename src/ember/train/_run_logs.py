"""Reading a finished run back from its metric logs, and drawing its curves (``ember plot``).

A run directory holds ``{train,valid}/epoch-{N}/{Name}.log`` (``docs/design.md``, "Metric logs").
:func:`read_run` finds every numeric metric in it (file stems, ``_`` read as a space) and its
epoch values; :func:`load_summary` gives the summary table (``summary.json``, or rebuilt from
the logs); :func:`plot_run` draws one subplot per metric, train and valid, against the epoch.

Drawing needs matplotlib (the ``ember[plot]`` extra), imported only by :func:`plot_run`; it
renders with the Agg backend and never opens a window.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ember.train._logger.file import FileMetricLogger
from ember.train._metric.store import EventStore, epoch_value
from ember.train._summary import LearnerSummary
from ember.train._vocabulary import Split

__all__ = ["RunLogs", "load_summary", "plot_run", "read_run"]

_EPOCH_DIR = re.compile(r"epoch-(\d+)")
_SPLITS = (Split.TRAIN, Split.VALID)
_COLORS = {Split.TRAIN: "tab:red", Split.VALID: "tab:blue"}  # the TUI's train/valid colours


@dataclass(frozen=True, slots=True)
class RunLogs:
    """The numeric metrics of a run directory and their epoch values.

    ``values[name][split]`` lists ``(epoch, value)`` for the epochs that logged ``name``.
    """

    directory: Path
    epochs: int
    values: dict[str, dict[Split, list[tuple[int, float]]]] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """The numeric metrics, sorted."""
        return sorted(self.values)

    def summary(self) -> LearnerSummary:
        """The summary table rebuilt from the logs (without the model, which is not logged)."""
        store = EventStore([FileMetricLogger(self.directory)])
        return LearnerSummary.collect(store, self.names, self.epochs)


def read_run(directory: str | os.PathLike[str]) -> RunLogs:
    """Find the numeric metric logs under ``directory`` and read their epoch values.

    A metric whose log does not hold numbers (a text metric) is left out. Raises
    ``FileNotFoundError`` when ``directory`` holds no ``train/`` or ``valid/`` epoch logs.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no training run in {str(directory)!r}: no such directory")
    epochs = 0
    stems: dict[str, list[tuple[Split, int]]] = {}
    for split in _SPLITS:
        split_dir = directory / split.value
        if not split_dir.is_dir():
            continue
        for epoch_dir in split_dir.iterdir():
            match = _EPOCH_DIR.fullmatch(epoch_dir.name)
            if match is None or not epoch_dir.is_dir():
                continue
            epoch = int(match.group(1))
            epochs = max(epochs, epoch)
            for log in epoch_dir.glob("*.log"):
                stems.setdefault(log.stem, []).append((split, epoch))
    if not stems:
        raise FileNotFoundError(
            f"no training run in {str(directory)!r}: no metric logs under its train/ or valid/ "
            "epoch-N directories"
        )
    logger = FileMetricLogger(directory)
    values: dict[str, dict[Split, list[tuple[int, float]]]] = {}
    for stem, places in sorted(stems.items()):
        name = stem.replace("_", " ")
        series: dict[Split, list[tuple[int, float]]] = {split: [] for split in _SPLITS}
        try:
            for split, epoch in sorted(places, key=lambda place: place[1]):
                value = epoch_value(logger.read_numeric(name, epoch, split))
                if value is not None:
                    series[split].append((epoch, value))
        except ValueError:  # not a numeric metric: its lines are text
            continue
        if any(series.values()):
            values[name] = series
    return RunLogs(directory, epochs, values)


def load_summary(directory: str | os.PathLike[str]) -> LearnerSummary:
    """The run's summary: ``summary.json`` when training wrote one, else rebuilt from the logs.

    Raises ``FileNotFoundError`` when ``directory`` holds no run and ``ValueError`` when its
    ``summary.json`` cannot be read.
    """
    directory = Path(directory)
    path = directory / "summary.json"
    if path.is_file():
        try:
            return LearnerSummary.from_json(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path} is not a learner summary: {error!r}") from None
    return read_run(directory).summary()


def _matplotlib() -> tuple[Any, Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:
        raise ImportError("ember plot needs matplotlib: pip install ember[plot]") from error
    return Figure, FigureCanvasAgg, MaxNLocator


def plot_run(
    directory: str | os.PathLike[str], output: str | os.PathLike[str] | None = None
) -> Path:
    """Draw the per-epoch train and valid values of every numeric metric of the run.

    One subplot per metric, x = epoch. Written to ``output`` (default ``directory/metrics.png``;
    the format follows its suffix) through a temporary file, so a failed draw leaves no partial
    image. Returns the path written. Raises ``FileNotFoundError`` when there is no run to draw.
    """
    run = read_run(directory)
    if not run.values:
        raise FileNotFoundError(f"no numeric metric logs in {str(run.directory)!r}")
    target = run.directory / "metrics.png" if output is None else Path(output)
    figure_type, canvas_type, integer_locator = _matplotlib()

    columns = min(len(run.names), 2)
    rows = math.ceil(len(run.names) / columns)
    figure = figure_type(figsize=(5.5 * columns, 3.6 * rows), layout="constrained")
    canvas_type(figure)  # Agg, whatever backend pyplot would pick: never a window
    axes = list(figure.subplots(rows, columns, squeeze=False).flat)
    for ax, name in zip(axes, run.names, strict=False):
        for split in _SPLITS:
            points = run.values[name][split]
            if points:
                epochs, values = zip(*points, strict=True)
                ax.plot(
                    epochs,
                    values,
                    marker="o",
                    markersize=3,
                    color=_COLORS[split],
                    label=split.value,
                )
        ax.set_title(name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(integer_locator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend()
    for ax in axes[len(run.names) :]:
        ax.set_visible(False)
    figure.suptitle(f"{run.directory.resolve().name}: {run.epochs} epochs")

    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    try:
        figure.savefig(temporary, format=target.suffix.lstrip(".") or "png", dpi=100)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target
