"""The summary tables on disk: ``summary.json`` (a training run's) and ``test/summary.json`` (an
evaluation's).

A run launched with ``.summary()`` writes its ``LearnerSummary`` (``ember/train/_summary.py``:
each numeric metric's best and worst epochs, the model, the stop reason) as ``summary.json`` at
the end of training; an evaluation with ``.summary()`` writes its ``EvaluationSummary`` as
``test/summary.json``, every test evaluated so far. Both are the tables' ``to_json()``, written
all or nothing. A resumed run that finished already reads its own back
(:func:`read_own_summary`); ``ember.runs`` and ``ember summary`` read a run's under the run
readers' guards (:func:`read_summary_json`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ember._rundir.atomic import atomic_write
from ember._rundir.guards import read_run_json

__all__ = [
    "EVALUATION_SUMMARY",
    "SUMMARY_FILE",
    "read_own_summary",
    "read_summary_json",
    "write_evaluation_summary",
    "write_summary",
]

SUMMARY_FILE = "summary.json"
"""A training run's summary table, in the run directory."""
EVALUATION_SUMMARY = f"test/{SUMMARY_FILE}"
"""An evaluation's summary table, under the run directory."""


def write_summary(directory: Path, text: str) -> None:
    """Write ``text``, a ``LearnerSummary``'s ``dumps()``, as ``directory/summary.json``."""
    atomic_write(directory / SUMMARY_FILE, text.encode("utf-8"))


def write_evaluation_summary(directory: Path, text: str) -> None:
    """Write ``text``, an ``EvaluationSummary``'s ``dumps()``, as ``directory/test/summary.json``
    (making ``test/``)."""
    path = directory / EVALUATION_SUMMARY
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text.encode("utf-8"))


def read_own_summary(directory: Path) -> dict[str, Any] | None:
    """The ``summary.json`` a launch wrote in ``directory``, as its JSON object (links followed,
    as when it was written); None without one, or when it holds something else."""
    path = directory / SUMMARY_FILE
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else None


def read_summary_json(directory: Path) -> Any:
    """The JSON document of the run's ``summary.json`` in ``directory`` (None without one), read
    under the run readers' guards (RunFileError naming a file they refuse)."""
    return read_run_json(directory / SUMMARY_FILE, directory)
