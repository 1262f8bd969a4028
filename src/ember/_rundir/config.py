"""A run's configuration on disk: ``config.json`` (every launch) and ``config.yaml`` (a run
launched inside ``ember.cli``).

``config.json`` is the run's configuration as ``ember/train/_config.py`` describes it (JSON, keys
sorted), written at every launch (a resume too) before the loggers start; the trackers get it
flattened to dotted keys (:func:`flatten_config`), and ``ember.runs`` reads it back
(:func:`read_config`). ``config.yaml`` is the YAML ``ember.cli`` resolved for ``main``
(``ember/train/_experiment.py``): ``python train.py --config RUN/config.yaml`` runs the experiment
again. Neither is flushed to disk when written: every launch writes them again, and two flushes
cost a short run several percent of its time (``benchmarks/precision.py``); the rename is still
all or nothing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ember._rundir.atomic import atomic_write
from ember._rundir.guards import read_run_json

__all__ = [
    "CONFIG_FILE",
    "CONFIG_YAML",
    "flatten_config",
    "read_config",
    "write_config",
    "write_config_yaml",
]

CONFIG_FILE = "config.json"
"""The run's configuration, in the run directory."""
CONFIG_YAML = "config.yaml"
"""The resolved YAML of the experiment, beside ``config.json`` in the run directory."""


def write_config(directory: Path, described: Mapping[str, Any]) -> None:
    """Write ``described`` as ``directory/config.json`` (see the module doc)."""
    text = json.dumps(described, indent=2, sort_keys=True) + "\n"
    atomic_write(directory / CONFIG_FILE, text.encode("utf-8"), sync=False)


def write_config_yaml(directory: Path, yaml: str) -> None:
    """Write ``yaml``, ``ember.cli``'s resolved configuration, as ``directory/config.yaml``."""
    atomic_write(directory / CONFIG_YAML, yaml.encode("utf-8"), sync=False)


def read_config(directory: Path) -> dict[str, Any]:
    """``config.json`` as a dict ({} without one); ValueError naming a file that is not one
    (RunFileError, also a ValueError, for one the run readers refuse)."""
    data = read_run_json(directory / CONFIG_FILE, directory)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{directory / CONFIG_FILE} is not a run configuration (a JSON object)")
    return data


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``config`` with nested mappings flattened to dotted keys (``optimizer.class``) and lists
    of mappings indexed (``optimizer.param_groups.0.lr``); the leaves as they are."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{name}."))
        elif isinstance(value, list) and any(isinstance(item, Mapping) for item in value):
            for index, item in enumerate(value):
                item_map = item if isinstance(item, Mapping) else {"value": item}
                flat.update(flatten_config(item_map, f"{name}.{index}."))
        else:
            flat[name] = value
    return flat
