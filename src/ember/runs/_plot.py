"""Curves of one run or several, overlaid: what ``ember plot`` and the ``curves`` artifact draw.

One panel per numeric metric, the epoch values against the epoch. One run: train in red, valid
in blue (the TUI's colours). Several: one colour per run, valid solid and train dashed, the
legend naming each run once. Drawing needs matplotlib (the ``ember[plot]`` extra), imported only
here; it renders with the Agg backend and never opens a window.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember.runs._logs import MetricRow
from ember.runs._run import Run, Runs

__all__ = ["plot"]

_SPLIT_COLORS = {"train": "tab:red", "valid": "tab:blue"}
_SPLIT_STYLES = {"train": "--", "valid": "-"}


def _matplotlib() -> tuple[Any, Any, Any]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError as error:
        raise ImportError("drawing curves needs matplotlib: pip install ember[plot]") from error
    return Figure, FigureCanvasAgg, MaxNLocator


def plot(runs: Run | Runs | Sequence[Run], output: str | os.PathLike[str] | None = None) -> Path:
    """Draw the epoch values of every numeric metric of ``runs``, one panel per metric.

    Written to ``output`` (the format follows its suffix: ``.png``, ``.svg``, ``.pdf``; for
    one run, by default ``DIR/metrics.png``) through a temporary file, so a failed draw leaves
    no partial image. Returns the path written. ``FileNotFoundError`` when no run logged a
    numeric metric; ``ValueError`` for several runs without ``output``.
    """
    chosen = [runs] if isinstance(runs, Run) else list(runs)
    if not chosen:
        raise ValueError("plot needs at least one run")
    if output is None and len(chosen) > 1:
        raise ValueError(
            f"{len(chosen)} runs: give the image to write (output=...), none of their "
            "directories is the place for it"
        )
    target = chosen[0].directory / "metrics.png" if output is None else Path(output)
    rows = [row for run in chosen for row in run.rows("epoch")]
    names = sorted({row.metric for row in rows})
    if not names:
        where = ", ".join(repr(str(run.directory)) for run in chosen)
        raise FileNotFoundError(f"no numeric metric logs in {where}")
    figure = _draw(chosen, rows, names)
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(target.name + ".tmp")
    try:
        figure.savefig(temporary, format=target.suffix.lstrip(".") or "png", dpi=100)
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    return target


def _draw(runs: list[Run], rows: list[MetricRow], names: list[str]) -> Any:
    figure_type, canvas_type, integer_locator = _matplotlib()
    columns = min(len(names), 2)
    lines = math.ceil(len(names) / columns)
    figure = figure_type(figsize=(5.5 * columns, 3.6 * lines), layout="constrained")
    canvas_type(figure)  # Agg, whatever backend pyplot would pick: never a window
    axes = list(figure.subplots(lines, columns, squeeze=False).flat)
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for row in rows:
        series.setdefault((row.metric, row.run, row.split), []).append((row.epoch, row.value))
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
