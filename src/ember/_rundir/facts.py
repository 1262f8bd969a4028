"""How a run ended, from the files a launch writes: its configuration, summary, end record,
checkpoints and application log.

* ``config.json``: the run's configuration (``config.py``): whether it validates, so which split
  ends an epoch;
* ``summary.json``: the summary table, written at the end of a launch with ``.summary()``;
* ``run-end.json``: written when a run finished (``num_epochs`` or ``max_steps`` reached, or
  early stopping), with checkpoints or without, and trusted only when its epoch is the newest
  checkpoint's (when the run has some), so that a run resumed and still training is never taken
  for finished; runs of 0.1.0 and 0.2.0 wrote it as ``checkpoint/run-end.json``, read there
  too;
* ``checkpoint/manifest-N.json`` and the state the checkpointing strategy saved: the best epoch,
  as ``LearningResult.best_epoch`` and ``ember export --epoch best`` read it;
* ``experiment.log``: from the last ``Starting training`` line (the latest launch), the reason
  of a stop (``Training interrupted: ...``, early stopping's ``Stopping training loop, ...``)
  and whether the launch failed (``Training failed``).

The last completed epoch comes from the end record of a finished run, else from the logs: the
newest epoch whose last split (valid, or train in a run that trains only) logged its epoch
values (:func:`epochs_logged`). ``ember.runs`` reads every fact here; the ``curves`` artifact, the
last epoch for its title. Nothing here imports the training loop; the files are read as JSON and
text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ember._errors import CheckpointError
from ember._rundir.best_epoch import best_epoch
from ember._rundir.end import RunEnd, read_run_end
from ember._rundir.guards import MAX_LOG_TAIL, read_run_tail
from ember._rundir.manifest import manifest_epochs
from ember._rundir.metric_logs import has_epoch_values

__all__ = ["RunFacts", "Summary", "epochs_logged", "read_facts"]

_LAUNCH = re.compile(r"^\S+ \S+ INFO ember\.train: Starting training for ", re.M)
_STOPPED = re.compile(
    r"^\S+ \S+ INFO ember\.train: (?:Training interrupted: |Stopping training loop, )(.*)$", re.M
)
_FAILED = re.compile(r"^\S+ \S+ ERROR ember\.train: Training failed$", re.M)


@dataclass(frozen=True, slots=True)
class RunFacts:
    """How a run ended, as far as its files say (see the module doc)."""

    last_epoch: int
    best_epoch: int | None
    stop_reason: str | None
    finished: bool
    failed: bool


class Summary(Protocol):
    """What the facts read of a run's summary table (``LearnerSummary``): how many epochs it
    covers and why the run stopped."""

    @property
    def epochs(self) -> int:
        """The run's epochs when the summary was written."""
        ...

    @property
    def stop_reason(self) -> str | None:
        """Why the run stopped early, or None."""
        ...


def epochs_logged(
    directory: Path, config: Mapping[str, Any], epochs: Mapping[str, Mapping[int, Path]]
) -> int:
    """The newest epoch whose last split (valid, or train in a run that trains only: its
    ``config``, else its logs say) logged its epoch values, of the ``epoch-N`` directories
    ``epochs`` of the run in ``directory`` (0: none)."""
    validates = config.get("valid") is not None if config else "valid" in epochs
    last_split = "valid" if validates else "train"
    logged = [
        epoch
        for epoch, path in epochs.get(last_split, {}).items()
        if has_epoch_values(path, directory)
    ]
    return max(logged, default=0)


def read_facts(directory: Path, summary: Summary | None, logged: int) -> RunFacts:
    """The facts of the run in ``directory`` with the summary table ``summary`` (None without
    one); ``logged`` is the newest epoch whose last split logged its epoch values
    (:func:`epochs_logged`)."""
    checkpoints = directory / "checkpoint"
    end = _run_end(directory, checkpoints)
    launch = _latest_launch(directory / "experiment.log", directory)
    if end is not None:
        last_epoch, reason = end.epoch, end.stop_reason
    else:
        last_epoch = logged
        found = _STOPPED.findall(launch or "")
        reason = found[-1] if found else None
        if reason is None and launch is None and summary is not None:
            reason = summary.stop_reason if summary.epochs == last_epoch else None
    return RunFacts(
        last_epoch,
        _best_epoch(checkpoints),
        reason,
        finished=end is not None,
        failed=launch is not None and _FAILED.search(launch) is not None,
    )


def _run_end(directory: Path, checkpoints: Path) -> RunEnd | None:
    """The end record, when it is the newest checkpoint's (else the run went on after it), or
    as it is in a run without checkpoints."""
    epochs = manifest_epochs(checkpoints)
    return read_run_end(directory, checkpoints, max(epochs) if epochs else None)


def _best_epoch(checkpoints: Path) -> int | None:
    if not checkpoints.is_dir():
        return None
    try:
        return best_epoch(checkpoints)
    except CheckpointError:  # no complete checkpoint: no best one either
        return None


def _latest_launch(path: Path, root: Path) -> str | None:
    """The application log from the latest launch's first line on (of its last
    ``MAX_LOG_TAIL`` bytes: how a launch ended is at its end); None without a log."""
    data = read_run_tail(path, root, MAX_LOG_TAIL)
    if data is None:
        return None
    text = data.decode("utf-8", errors="replace")
    starts = [match.start() for match in _LAUNCH.finditer(text)]
    return text[starts[-1] :] if starts else text
