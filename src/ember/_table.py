"""How ember's tables show metrics: a metric's label and Burn's cell for a value.

The same in the summary tables (``ember/train/_summary.py``), the renderers' lines (a metric
definition's label) and ``ember compare`` (``ember/runs/_compare.py``), so a metric reads alike
wherever it is shown.
"""

from __future__ import annotations

import math

__all__ = ["format_cell", "metric_label"]


def metric_label(name: str, unit: str | None) -> str:
    """How a metric is named beside its values, the same in every table and renderer line:
    its name, then its unit in parentheses if it has one (``Accuracy (%)``, ``Loss``)."""
    return f"{name} ({unit})" if unit else name


def format_cell(value: float) -> str:
    """A table cell value as Burn prints it: 3 decimals, Rust's exponent form below 0.01."""
    if math.isnan(value):
        text = "NaN"
    elif value < 1e-2:
        mantissa, exponent = f"{value:.3e}".split("e")
        text = f"{mantissa}e{int(exponent)}"
    else:
        text = f"{value:.3f}"
    return f"{text:<9}"
