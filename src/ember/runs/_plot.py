"""``plot``: curves of one run or several, overlaid: what ``ember plot`` draws.

The drawing is the run directory's ``metrics.png`` (``ember/_rundir/curves.py``), the same as the
``curves`` artifact a logger can ask for.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ember._rundir.curves import CURVES_FILE, Curves, draw_curves
from ember.runs._run import Run, Runs

__all__ = ["plot"]


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
    target = chosen[0].directory / CURVES_FILE if output is None else Path(output)
    return draw_curves([_curves(run) for run in chosen], target)


def _curves(run: Run) -> Curves:
    values = tuple((row.split, row.metric, row.epoch, row.value) for row in run.rows("epoch"))
    return Curves(run.name, run.directory, run.last_epoch, values)
