"""A run directory's layout: what in it is ember's, which of it means a run was launched
there, and its removal (``overwrite()``).

::

    DIR/experiment.log, evaluation.log, config.json, config.yaml, summary.json, run-end.json,
        metrics.png, model.safetensors                           written directly (OWNED)
    DIR/.ember.lock                                              the writer's lock (LOCK)
    DIR/{train,valid}/epoch-{N}/*.log, DIR/{train,valid}/steps.jsonl,
    DIR/test/{name}/*.log, DIR/test/summary.json                 the split logs
    DIR/checkpoint/{manifest-N.json, {model,optim,scheduler,state}-N.safetensors,
        shards-rank{r}-N.safetensors, run-end.json (0.2.0), .*.tmp}, and in its step-K/
                                                                 the checkpoint files

A file of the user's among them (a note inside ``train/``) is never counted nor removed, and a
symbolic link is never followed to what it points at. ``_directory.py`` claims a run directory
with it: a fresh run never writes into one that holds another run's files (``used_by_a_run``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ember._rundir.checkpoints import RECORDS, SUFFIX, step_directories
from ember._rundir.config import CONFIG_FILE, CONFIG_YAML
from ember._rundir.curves import CURVES_FILE
from ember._rundir.end import RUN_END
from ember._rundir.steps import STEPS_FILE
from ember._rundir.summary import SUMMARY_FILE

__all__ = ["LOCK", "OWNED", "RUNS", "RUN_FILES", "remove_run", "used_by_a_run"]

LOCK = ".ember.lock"
"""The lock file of a run directory: the holder's pid, host and start time (JSON)."""

RUNS = ("train", "valid", "test")
"""The split log directories: ember's logs in them mean a run was logged here."""

OWNED = (
    "experiment.log",
    "evaluation.log",
    CONFIG_FILE,
    CONFIG_YAML,
    SUMMARY_FILE,
    RUN_END,
    CURVES_FILE,
    "model.safetensors",  # the best epoch's export, when a logger asks for it
)
"""The files ember writes directly in a run directory (beside the split logs and checkpoints)."""

RUN_FILES = (CONFIG_FILE, SUMMARY_FILE, RUN_END)
"""The files of ``OWNED`` that mean a run was launched here (what ``ember.runs`` reads): not the
application log, which accumulates across launches, nor the exports of a run read later."""

_EPOCH = re.compile(r"epoch-[1-9][0-9]*")
_CHECKPOINT_FILE = re.compile(
    rf"manifest-[1-9][0-9]*\.json|(?:{'|'.join(RECORDS)}|shards-rank[0-9]+)-[1-9][0-9]*"
    rf"{re.escape(SUFFIX)}"
    rf"|{re.escape(RUN_END)}|\..+\.tmp"
)


def used_by_a_run(directory: Path, checkpoints: Path | None) -> list[str]:
    """What of another run ``directory`` holds: its logs, checkpoints, and the files of
    ``RUN_FILES`` (names, sorted)."""
    found = [name for name in RUNS if _split_logs(directory / name)]
    found += [name for name in RUN_FILES if (directory / name).is_file()]
    files = _checkpoint_files(checkpoints)
    if checkpoints is not None and files:
        found.append(f"{_shown(directory, checkpoints)} ({len(files)} checkpoint files)")
    return sorted(found)


def remove_run(directory: Path, checkpoints: Path | None) -> None:
    """Remove what ember wrote in ``directory`` and ember's checkpoint files, nothing else: a
    directory is removed only when that leaves it empty."""
    for name in OWNED:
        path = directory / name
        if path.is_file() or path.is_symlink():
            path.unlink()
    for split in RUNS:
        _remove_logs(directory / split)
    for path in _checkpoint_files(checkpoints):
        path.unlink()
    if checkpoints is None:
        return
    for emptied in [*step_directories(checkpoints).values(), checkpoints]:
        if emptied.is_dir() and not any(emptied.iterdir()):
            emptied.rmdir()


def _split_logs(split: Path) -> list[Path]:
    """ember's files in the split log directory ``split``: ``epoch-N/*.log`` and the split's
    ``steps.jsonl`` (train, valid), ``{name}/*.log`` and ``summary.json`` (test); never a
    symlink's target."""
    if not split.is_dir() or split.is_symlink():
        return []
    found = [split / (SUMMARY_FILE if split.name == "test" else STEPS_FILE)]
    for child in split.iterdir():
        ours = _EPOCH.fullmatch(child.name) if split.name != "test" else True
        if ours and child.is_dir() and not child.is_symlink():
            found.extend(child.glob("*.log"))
    return [path for path in found if path.is_file() or path.is_symlink()]


def _remove_logs(split: Path) -> None:
    """Remove ember's logs in ``split``, then the directories that held them (and ``split``)
    where that left them empty."""
    logs = _split_logs(split)
    for path in logs:
        path.unlink()
    held = {path.parent for path in logs} | ({split} if logs else set())
    for directory in sorted(held, key=lambda path: len(path.parts), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()


def _checkpoint_files(checkpoints: Path | None) -> list[Path]:
    """ember's checkpoint files in ``checkpoints``, mid-round ones (in ``step-K/``) included."""
    if checkpoints is None or not checkpoints.is_dir():
        return []
    directories = [checkpoints, *step_directories(checkpoints).values()]
    return [
        path
        for directory in directories
        for path in directory.iterdir()
        if _CHECKPOINT_FILE.fullmatch(path.name)
    ]


def _shown(directory: Path, path: Path) -> str:
    try:
        return f"{path.relative_to(directory)}/"
    except ValueError:
        return f"{path}/"
