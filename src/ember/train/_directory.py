"""The run directory a launch writes: held by one process at a time, never mixed with another run.

::

    versioned_run(config):                   (builder.versioned(), before the launch)
        a fresh run: DIR/version_N, N one more than the highest version there (0 for the first)
        a resume:    the highest version (version_0 when there is none yet)

    claim_directory(directory, fresh, overwrite, checkpoints):   (the main process only)
        make the directory
        take its lock: LOCK, created with O_EXCL, holding {"pid", "host", "started"}
            held by a live process, or by another host:  RunDirectoryError naming pid and host
            left by a dead process of this host:         taken over, with a warning
        a fresh run (no resume) into a directory with another run's logs or checkpoints:
            overwrite():  remove what ember wrote (OWNED, the split logs, the checkpoint files),
                          nothing else: a file of the user's inside train/ stays
            otherwise:    RunDirectoryError naming what is there and the three choices
        ... the run ...
        release the lock (also after an error); the directories the claim made and nothing was
        written to are removed again (a launch refused before training leaves nothing behind)

What ember writes in a run directory: the split logs ``{train,valid}/epoch-N/*.log``,
``test/{name}/*.log`` and ``test/summary.json``, the checkpoints (``checkpoint/`` by default),
``experiment.log``, ``evaluation.log``, ``config.json``, ``config.yaml`` (``ember.cli``),
``summary.json``, ``metrics.png`` (``ember plot``) and ``model.safetensors`` (an export).

Two runs never share a directory, so running the same training twice needs a new directory
each time: ``versioned()`` picks ``version_N`` (Lightning's habit), and ``resume_latest()`` with
it goes on in the newest version. Two processes that start at the same moment may pick the same
``N``: the lock refuses the second (``RunDirectoryError``), never mixes them.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import socket
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from ember._errors import RunDirectoryError
from ember.train._checkpoint.end import RUN_END
from ember.train._checkpoint.file import SUFFIX
from ember.train._checkpoint.learning import NAMES
from ember.train._checkpoint.mid_round import step_directories
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._experiment import CONFIG_YAML
from ember.train._logger.file import STEPS_FILE
from ember.train._strategy.single import SingleDevice

__all__ = [
    "LOCK",
    "OWNED",
    "VERSION",
    "claim_directory",
    "claim_for_run",
    "used_by_a_run",
    "versioned_run",
]

LOCK = ".ember.lock"
"""The lock file of a run directory: the holder's pid, host and start time (JSON)."""

RUNS = ("train", "valid", "test")
"""The split log directories: ember's logs in them mean a run was logged here."""

OWNED = (
    "experiment.log",
    "evaluation.log",
    "config.json",
    CONFIG_YAML,
    "summary.json",
    "metrics.png",
    "model.safetensors",  # the best epoch's export, when a logger asks for it
)
"""The files ember writes directly in a run directory (beside the split logs and checkpoints)."""

VERSION = "version_{}"
"""The name of a version of a ``versioned()`` run directory."""

_EPOCH = re.compile(r"epoch-[1-9][0-9]*")
_VERSION = re.compile(r"version_(0|[1-9][0-9]*)")

_CHECKPOINT_FILE = re.compile(
    rf"manifest-[1-9][0-9]*\.json|(?:{'|'.join(NAMES)}|shards-rank[0-9]+)-[1-9][0-9]*"
    rf"{re.escape(SUFFIX)}"
    rf"|{re.escape(RUN_END)}|\..+\.tmp"
)


def claim_for_run(config: TrainingConfig) -> AbstractContextManager[None]:
    """The claim of ``config``'s run directory; nothing on the processes that do not write it
    (DDP ranks other than 0)."""
    if not (config.strategy or SingleDevice()).is_main:
        return nullcontext()
    checkpointer = config.checkpointer
    checkpoints = None
    if isinstance(checkpointer, str):  # DEFAULT_CHECKPOINTERS
        checkpoints = config.directory / "checkpoint"
    elif checkpointer is not None:
        checkpoints = checkpointer.directory
    return claim_directory(
        config.directory,
        fresh=config.resume is None,
        overwrite=config.overwrite,
        checkpoints=checkpoints,
    )


@contextmanager
def claim_directory(
    directory: Path, *, fresh: bool, overwrite: bool, checkpoints: Path | None
) -> Iterator[None]:
    """Hold ``directory`` for one run (see the module doc); ``checkpoints`` is the checkpoint
    directory, if any; ``fresh``: the run starts at epoch 1 (no resume was asked for)."""
    if overwrite and not fresh:
        raise ValueError(
            "overwrite() starts the run afresh and removes the earlier run's files, but a "
            "resume was asked for too (checkpoint(epoch) or resume_latest()): drop one of them"
        )
    made = _outermost_missing(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / LOCK
    mine = _acquire(lock)
    try:
        if fresh:
            found = used_by_a_run(directory, checkpoints)
            if found and not overwrite:
                raise RunDirectoryError(_used_message(directory, found))
            if found:
                _remove_run(directory, checkpoints)
        yield
    finally:
        _release(lock, mine)
        if made is not None:
            _remove_empty(directory, made)


def _outermost_missing(directory: Path) -> Path | None:
    """The outermost of ``directory`` and its parents that does not exist, or None."""
    missing = None
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing = path
    return missing


def _remove_empty(directory: Path, up_to: Path) -> None:
    """Remove ``directory`` and its parents up to ``up_to`` while they are empty."""
    for path in (directory, *directory.parents):
        if not path.is_dir() or any(path.iterdir()):
            return
        path.rmdir()
        if path == up_to:
            return


def used_by_a_run(directory: Path, checkpoints: Path | None) -> list[str]:
    """What of another run's logs and checkpoints ``directory`` holds (names, sorted)."""
    found = [name for name in RUNS if _split_logs(directory / name)]
    files = _checkpoint_files(checkpoints)
    if checkpoints is not None and files:
        found.append(f"{_shown(directory, checkpoints)} ({len(files)} checkpoint files)")
    return sorted(found)


def _used_message(directory: Path, found: list[str]) -> str:
    return (
        f"{str(directory)!r} holds another run's logs or checkpoints ({', '.join(found)}); a "
        "fresh run there would mix its epochs with that run's. Choose one: resume that run "
        "with resume_latest(), give this run a new directory (versioned() picks a new "
        "version_N each time), or call overwrite() to remove what ember wrote there (its logs, "
        "checkpoints, experiment.log, config.json, summary.json; nothing else) and start afresh"
    )


def _remove_run(directory: Path, checkpoints: Path | None) -> None:
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
    found = [split / ("summary.json" if split.name == "test" else STEPS_FILE)]
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


def versioned_run(config: TrainingConfig) -> TrainingConfig:
    """``config`` with its run directory in the version of ``config.directory`` a
    ``versioned()`` run takes (see the module doc); ``config`` itself when not versioned."""
    if not config.versioned:
        return config
    _check_versioned(config)
    versions = [
        int(found[1])
        for path in (config.directory.iterdir() if config.directory.is_dir() else ())
        if (found := _VERSION.fullmatch(path.name)) and path.is_dir()
    ]
    newest = max(versions, default=-1)
    number = max(newest, 0) if config.resume is not None else newest + 1
    directory = config.directory / VERSION.format(number)
    log = config.application_log
    if log == config.directory / "experiment.log":  # the default: the run's own
        log = directory / "experiment.log"
    return dataclasses.replace(config, directory=directory, application_log=log)


def _check_versioned(config: TrainingConfig) -> None:
    """Refuse what a new directory per launch contradicts: ``overwrite()``, a checkpointer with
    a directory of its own, and a job of several processes (each would pick its own)."""
    if config.overwrite:
        raise ValueError(
            "versioned() gives every fresh run a new directory, so overwrite() has nothing to "
            "remove: drop one of them"
        )
    checkpointer = config.checkpointer
    if checkpointer is not None and checkpointer != DEFAULT_CHECKPOINTERS:
        raise ValueError(
            "versioned() gives every run a new directory, but the checkpointer given to "
            f"with_checkpointers() writes {str(getattr(checkpointer, 'directory', '?'))!r} for "
            "all of them: use with_default_checkpointers() (and with_checkpointing_strategy() "
            "for which epochs to keep), or give each run its directory yourself"
        )
    world = os.environ.get("WORLD_SIZE", "1")
    if world.isdigit() and int(world) > 1:
        raise ValueError(
            f"versioned() picks the version in each process, and this job has {world} "
            "(WORLD_SIZE): they could pick different ones. Give the run directory itself, "
            "chosen once before the processes start"
        )


def _shown(directory: Path, path: Path) -> str:
    try:
        return f"{path.relative_to(directory)}/"
    except ValueError:
        return f"{path}/"


# --- the lock -----------------------------------------------------------------------------------


def _acquire(lock: Path) -> str:
    """Create ``lock`` for this process; returns its content (to release only our own lock)."""
    content = json.dumps(
        {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
    )
    for _ in range(3):  # a stale lock removed, then created again by a process that won the race
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            _take_over_if_stale(lock)
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        return content
    raise RunDirectoryError(
        f"could not take the lock {str(lock)!r}: other processes keep taking it"
    )


def _take_over_if_stale(lock: Path) -> None:
    """Remove ``lock`` if its holder is a dead process of this host; otherwise refuse."""
    try:
        holder = json.loads(lock.read_text(encoding="utf-8"))
        pid, host, started = int(holder["pid"]), str(holder["host"]), str(holder["started"])
        if pid <= 0:
            raise ValueError(f"not a process id: {pid}")
    except FileNotFoundError:  # released meanwhile: try again
        return
    except (OSError, ValueError, KeyError, TypeError):
        raise RunDirectoryError(
            f"the run directory's lock {str(lock)!r} cannot be read (a run may be starting "
            "there); if no run uses this directory, delete that file"
        ) from None
    if host != socket.gethostname() or _alive(pid):
        where = "this host" if host == socket.gethostname() else f"host {host!r}"
        raise RunDirectoryError(
            f"another process writes this run directory: pid {pid} on {where}, since {started} "
            f"(lock {str(lock)!r}); wait for it to end or stop it, or use another directory"
            + ("" if where == "this host" else "; if that process is gone, delete the lock")
        )
    warnings.warn(
        f"taking over the lock {str(lock)!r} of pid {pid} (started {started}), which is no "
        "longer running: its run ended without releasing it",
        RuntimeWarning,
        stacklevel=2,
    )
    lock.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _release(lock: Path, mine: str) -> None:
    """Remove ``lock`` if it still is ours (a taken-over lock belongs to its new holder)."""
    try:
        if lock.read_text(encoding="utf-8") == mine:
            lock.unlink()
    except FileNotFoundError:
        pass
