"""How a finished run ended, recorded in its run directory (``run-end.json``).

::

    {"format": "ember.run-end", "epoch": e, "num_epochs": n, "stop_reason": reason | null,
     "max_steps": m | null}

written when a run finished (``num_epochs`` or ``max_steps`` reached, or early stopping),
whether or not it keeps checkpoints, and removed when a run starts training (after its
checkpoint was restored), so ``resume_latest()`` and ``ember.runs`` can tell a complete run from
an interrupted one: they trust the record only when its epoch is the run's newest (the newest
complete checkpoint, or, without checkpoints, the newest epoch logged; ``_finished.py``,
``ember/_rundir/facts.py``). Runs of 0.1.0 and 0.2.0 wrote it beside their checkpoints: it is
still read there, after the run directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ember._errors import RunFileError
from ember._rundir.atomic import atomic_write
from ember._rundir.guards import parse_json, read_run_bytes

__all__ = ["RUN_END", "RunEnd", "clear_run_end", "read_run_end"]

_FORMAT = "ember.run-end"
RUN_END = "run-end.json"
"""The file, in the run directory (before 0.3.0: the checkpoint directory), that records how a
finished run ended."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a finished run ended: its last epoch (round), the ``num_epochs`` and ``max_steps``
    it was asked for, and the early-stopping reason (None: its duration was reached)."""

    epoch: int
    num_epochs: int
    stop_reason: str | None = None
    max_steps: int | None = None

    def write(self, directory: Path) -> None:
        """Record this end in ``directory`` (the run directory), atomically."""
        data = {
            "format": _FORMAT,
            "epoch": self.epoch,
            "num_epochs": self.num_epochs,
            "stop_reason": self.stop_reason,
            "max_steps": self.max_steps,
        }
        atomic_write(directory / RUN_END, (json.dumps(data, indent=2) + "\n").encode("utf-8"))

    def complete_for(self, num_epochs: int, max_steps: int | None = None) -> bool:
        """Whether a resume asking for ``num_epochs`` (and ``max_steps``) has nothing left to
        train: it asks for no more epochs and no more steps than this run was."""
        more_steps = max_steps is not None and (
            self.max_steps is None or max_steps > self.max_steps
        )
        return num_epochs <= self.num_epochs and not more_steps


def read_run_end(directory: Path, checkpoints: Path | None, latest: int | None) -> RunEnd | None:
    """The recorded end of the run in ``directory`` whose newest epoch is ``latest`` (its newest
    complete checkpoint; None: a run without checkpoints, whose record is taken as it is), or
    None (no record, an unreadable one, or one of another epoch: the run went on after it); a
    run of 0.1.0 or 0.2.0 recorded it beside its ``checkpoints``. A record the run readers
    refuse (not a regular file inside its directory, too big) is a RunFileError."""
    for where in (directory, checkpoints):
        end = None if where is None else _read(where, latest)
        if end is not None:
            return end
    return None


def _read(where: Path, latest: int | None) -> RunEnd | None:
    path = where / RUN_END
    text = read_run_bytes(path, where)
    try:
        data = None if text is None else parse_json(text, path)
    except RunFileError:  # a damaged record: not known to be finished
        return None
    if not isinstance(data, dict) or data.get("format") != _FORMAT:
        return None
    epoch, num_epochs, reason = data.get("epoch"), data.get("num_epochs"), data.get("stop_reason")
    max_steps = data.get("max_steps")  # absent in records of runs without max_steps
    if (
        not isinstance(epoch, int)
        or (latest is not None and epoch != latest)
        or not isinstance(num_epochs, int)
        or not isinstance(reason, str | None)
        or not isinstance(max_steps, int | None)
    ):
        return None
    return RunEnd(epoch, num_epochs, reason, max_steps)


def clear_run_end(directory: Path, checkpoints: Path | None) -> None:
    """Forget a recorded end (in the run ``directory``, and beside the ``checkpoints`` of a run
    of 0.1.0 or 0.2.0): this run trains, so the directory's run is not finished."""
    (directory / RUN_END).unlink(missing_ok=True)
    if checkpoints is not None:
        (checkpoints / RUN_END).unlink(missing_ok=True)
