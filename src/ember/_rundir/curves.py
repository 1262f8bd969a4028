"""``metrics.png``: the curves of one run or several, overlaid; what ``ember plot``
(``ember.runs.plot``) and the ``curves`` artifact draw.

One panel per numeric metric, the epoch values against the epoch. One run: train in red, valid
in blue (the TUI's colours). Several: one colour per run, valid solid and train dashed, the
legend naming each run once. Drawing needs matplotlib (the ``ember[plot]`` extra), imported only
here; it renders with the Agg backend and never opens a window, and writes the image through a
temporary file, so a failed draw leaves no partial image.

What is drawn is each run's :class:`Curves`: ``ember.runs`` makes them from its ``Run`` values,
the ``curves`` artifact from the run's files (:func:`run_curves`), alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember._rundir.config import read_config
from ember._rundir.facts import epochs_logged, read_facts
from ember._rundir.metric_logs import epoch_directories, epoch_value, read_run_logs

__all__ = ["CURVES_FILE", "Curves", "draw_curves", "run_curves"]

CURVES_FILE = "metrics.png"
"""Where ``ember plot`` draws one run's curves by default, and the ``curves`` artifact."""

_SPLIT_COLORS = {"train": "tab:red", "valid": "tab:blue"}
_SPLIT_STYLES = {"train": "--", "valid": "-"}


@dataclass(frozen=True, slots=True)
class Curves:
    """One run's curves: its ``name`` (the legend's, and the title's for one run), its
    ``directory`` (named when nothing is drawn), its ``last_epoch`` (completed, for the title),
    and its epoch ``values``: ``(split, metric, epoch, value)``, in the order they were logged."""

    name: str
    directory: Path
    last_epoch: int
    values: tuple[tuple[str, str, int, float], ...]


def run_curves(directory: Path) -> Curves:
    """The curves of the run in ``directory`` as its files hold them now, named after it as
    ``ember.runs.load`` names it."""
    epochs = epoch_directories(directory)
    logged = epochs_logged(directory, read_config(directory), epochs)
    values = tuple(
        (log.split, log.metric, log.epoch, value)
        for log in read_run_logs(directory)
        if (value := epoch_value(log.entries)) is not None
    )
    last_epoch = read_facts(directory, None, logged).last_epoch
    return Curves(directory.resolve().name, directory, last_epoch, values)


def draw_curves(runs: Sequence[Curves], target: Path) -> Path:
    """Draw the epoch values of every numeric metric of ``runs``, one panel per metric, to
    ``target`` (the format follows its suffix: ``.png``, ``.svg``, ``.pdf``); returns it.
    ``FileNotFoundError`` when no run logged a numeric metric."""
    names = sorted({metric for run in runs for _, metric, _, _ in run.values})
    if not names:
        where = ", ".join(repr(str(run.directory)) for run in runs)
        raise FileNotFoundError(f"no numeric metric logs in {where}")
    figure = _draw(runs, names)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    try:
        figure.savefig(temporary, format=target.suffix.lstrip(".") or "png", dpi=100)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def _matplotlib() -> tuple[Any, Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:
        raise ImportError("drawing curves needs matplotlib: pip install ember[plot]") from error
    return Figure, FigureCanvasAgg, MaxNLocator


def _draw(runs: Sequence[Curves], names: list[str]) -> Any:
    figure_type, canvas_type, integer_locator = _matplotlib()
    columns = min(len(names), 2)
    lines = math.ceil(len(names) / columns)
    figure = figure_type(figsize=(5.5 * columns, 3.6 * lines), layout="constrained")
    canvas_type(figure)  # Agg, whatever backend pyplot would pick: never a window
    axes = list(figure.subplots(lines, columns, squeeze=False).flat)
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for run in runs:
        for split, metric, epoch, value in run.values:
            series.setdefault((metric, run.name, split), []).append((epoch, value))
    several = len(runs) > 1
    for ax, name in zip(axes, names, strict=False):
        for index, run in enumerate(runs):
            named = False  # the legend names each run once (its first curve)
            for split in ("train", "valid"):
                points = series.get((name, run.name, split))
                if points:
                    label = (None if named else run.name) if several else split
                    _line(ax, points, index if several else None, label, split)
                    named = True
        ax.set_title(f"{name} (solid: valid, dashed: train)" if several else name)
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(integer_locator(integer=True))
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    for ax in axes[len(names) :]:
        ax.set_visible(False)
    if len(runs) == 1:
        figure.suptitle(f"{runs[0].name}: {runs[0].last_epoch} epochs")
    return figure


def _line(
    ax: Any, points: list[tuple[int, float]], index: int | None, label: str | None, split: str
) -> None:
    """One curve: for a single run (``index`` None) coloured by split; for several, by run
    (``C{index}``), valid solid and train dashed."""
    epochs, values = zip(*points, strict=True)
    color = _SPLIT_COLORS[split] if index is None else f"C{index % 10}"
    style = "-" if index is None else _SPLIT_STYLES[split]
    ax.plot(epochs, values, marker="o", markersize=3, color=color, linestyle=style, label=label)
