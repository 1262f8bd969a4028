"""Runs side by side, as text: what ``ember compare`` prints.

For each numeric metric and split, a table with a row per run: its best epoch value and the
epoch (round) of it, and its last epoch value and that epoch. Better is lower, or higher for a
metric whose attributes say so (``higher_is_better``, recorded in ``config.json``'s
``directions``; a run written before ember recorded them counts lower as better). Then the
configuration keys whose values differ between the runs (dotted keys, as
``optimizer.param_groups.0.lr``; the run directory itself left out).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from ember._rundir.config import flatten_config
from ember._table import format_cell, metric_label
from ember.runs._logs import MetricRow
from ember.runs._run import Run, Runs, unit_of

__all__ = ["compare", "differing_config"]

_SPLIT_ORDER = {"valid": 0, "train": 1}


def compare(runs: Runs | Sequence[Run]) -> str:
    """The comparison of ``runs`` as text (see the module doc)."""
    chosen = list(runs)
    names = [run.name for run in chosen]
    width = max([3, *(len(name) for name in names)])
    out = ["Runs:"] + [f"  {run.name}: {run.describe()}" for run in chosen]
    series: dict[tuple[str, str], dict[str, list[MetricRow]]] = {}
    for run in chosen:
        for row in run.rows("epoch"):
            series.setdefault((row.split, row.metric), {}).setdefault(run.name, []).append(row)
    for split, metric in sorted(series, key=lambda key: (_SPLIT_ORDER[key[0]], key[1])):
        higher = _higher_is_better(chosen, metric)
        label = metric_label(metric, unit_of(chosen, metric))
        out += ["", f"{split.capitalize()} {label} ({'higher' if higher else 'lower'} is better)"]
        out += [
            f"| {'Run':<{width}} | Best      | Epoch | Last      | Epoch |",
            f"|{'-' * (width + 2)}|-----------|-------|-----------|-------|",
        ]
        for name in names:
            rows = series[(split, metric)].get(name)
            if rows:
                best, last = _best(rows, higher), rows[-1]
                out.append(
                    f"| {name:<{width}} | {format_cell(best.value)} | {best.epoch:<5} "
                    f"| {format_cell(last.value)} | {last.epoch:<5} |"
                )
    out += ["", *_config_lines(chosen)]
    return "\n".join(out)


def differing_config(runs: Sequence[Run]) -> dict[str, list[Any]]:
    """The configuration keys (dotted) whose values differ between ``runs``, each with the
    value of every run (None where a run has no such key); the directory is left out."""
    flat = [flatten_config(run.config) for run in runs]
    differing: dict[str, list[Any]] = {}
    for key in sorted({key for one in flat for key in one} - {"directory"}):
        values = [one.get(key) for one in flat]
        if len({json.dumps(value, sort_keys=True) for value in values}) > 1:
            differing[key] = values
    return differing


def _config_lines(runs: Sequence[Run]) -> list[str]:
    if len(runs) < 2:
        return []
    differing = differing_config(runs)
    if not differing:
        return ["Configuration: the same in every run (besides the directory)."]
    width = max(len(key) for key in differing)
    out = ["Configuration keys that differ:"]
    for key, values in differing.items():
        shown = ", ".join(
            f"{run.name}={_text(value)}" for run, value in zip(runs, values, strict=True)
        )
        out.append(f"  {key:<{width}}  {shown}")
    return out


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _best(rows: Sequence[MetricRow], higher: bool) -> MetricRow:
    """The best row, the earliest of equals; NaN never wins over a number."""

    def key(row: MetricRow) -> float:
        if math.isnan(row.value):
            return math.inf
        return -row.value if higher else row.value

    return min(rows, key=key)


def _higher_is_better(runs: Sequence[Run], metric: str) -> bool:
    """What the runs' configurations say of ``metric`` (the first that says); lower else."""
    for run in runs:
        directions = run.config.get("directions")
        if isinstance(directions, Mapping) and metric in directions:
            return bool(directions[metric] == "highest")
    return False
