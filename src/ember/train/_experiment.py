"""The experiment a run belongs to: the configuration ``ember.cli`` resolved for ``main``.

``ember.cli(main)`` (``ember/_experiment_cli.py``) reads the command line and its ``--config``
files, then calls ``main`` inside :func:`running_experiment`. Every run launched while ``main``
runs records that configuration, at launch:

* in ``config.json`` as ``"cli"``: the resolved values as plain JSON, keys spelled as ``main``'s
  parameters and its dataclasses' fields are (``{"lr": 0.1, "data": {"batch_size": 64}}``), so
  the trackers get them with the rest of the configuration (MLflow's ``cli.data.batch_size``);
* as ``config.yaml``, the resolved YAML: ``python train.py --config RUN/config.yaml`` runs the
  experiment again with the same values.

Where it is held: a context variable, set for the thread that calls ``ember.cli`` (a run
launched there, as ``main`` usually does, reads it), and, while ``main`` runs, the environment
variable ``EMBER_CLI_CONFIG``, which the threads ``main`` starts read and the processes it starts
inherit (the ranks of ``ember.distributed.spawn``); both are restored when ``main`` returns.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember._rundir.config import write_config_yaml

__all__ = [
    "ENVIRONMENT",
    "Experiment",
    "current_experiment",
    "running_experiment",
    "write_experiment_config",
]

ENVIRONMENT = "EMBER_CLI_CONFIG"
"""The environment variable that carries the experiment into the threads and processes of
``main``: JSON ``{"values": ..., "yaml": ...}``."""


@dataclass(frozen=True, slots=True)
class Experiment:
    """What ``ember.cli`` resolved: ``values`` as plain JSON-able data, and the same as ``yaml``
    text that ``--config`` reads back."""

    values: Mapping[str, Any]
    yaml: str


_CURRENT: ContextVar[Experiment | None] = ContextVar("ember_experiment", default=None)


@contextmanager
def running_experiment(experiment: Experiment) -> Iterator[None]:
    """Make ``experiment`` the current one for the block (see the module doc)."""
    token = _CURRENT.set(experiment)
    previous = os.environ.get(ENVIRONMENT)
    os.environ[ENVIRONMENT] = json.dumps({"values": experiment.values, "yaml": experiment.yaml})
    try:
        yield
    finally:
        _CURRENT.reset(token)
        if previous is None:
            os.environ.pop(ENVIRONMENT, None)
        else:
            os.environ[ENVIRONMENT] = previous


def current_experiment() -> Experiment | None:
    """The experiment of the ``ember.cli`` call running now (this thread's, else the one the
    environment carries), or None."""
    experiment = _CURRENT.get()
    if experiment is not None:
        return experiment
    carried = os.environ.get(ENVIRONMENT)
    if carried is None:
        return None
    try:
        decoded = json.loads(carried)
        return Experiment(dict(decoded["values"]), str(decoded["yaml"]))
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f"the environment variable {ENVIRONMENT} (set by ember.cli for the processes its "
            f"main starts) is not what ember.cli writes: {carried[:80]!r}; unset it"
        ) from None


def write_experiment_config(directory: Path) -> None:
    """Write the current experiment's YAML as ``directory/config.yaml``; nothing without one."""
    experiment = current_experiment()
    if experiment is not None:
        write_config_yaml(directory, experiment.yaml)
