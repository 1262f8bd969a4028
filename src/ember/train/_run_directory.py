"""The run directory a launch writes: held by one process at a time, never mixed with another run.

::

    claim_run_directory(directory, fresh, overwrite, checkpoints):   (the main process only)
        make the directory
        take its lock: LOCK, created with O_EXCL, holding {"pid", "host", "started"}
            held by a live process, or by another host:  RunDirectoryError naming pid and host
            left by a dead process of this host:         taken over, with a warning
        a fresh run (no resume) into a directory with another run's logs or checkpoints:
            overwrite():  remove what ember wrote (OWNED, the checkpoint files), nothing else
            otherwise:    RunDirectoryError naming what is there and the three choices
        ... the run ...
        release the lock (also after an error); a directory the claim made and nothing was
        written to is removed again (a launch refused before training leaves nothing behind)

What ember writes in a run directory: the split logs ``train/``, ``valid/``, ``test/``, the
checkpoints (``checkpoint/`` by default), ``experiment.log``, ``evaluation.log``,
``config.json``, ``summary.json`` and ``metrics.png`` (``ember plot``).
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import socket
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from ember._errors import RunDirectoryError
from ember.train._checkpoint.file import SUFFIX
from ember.train._checkpoint.learning import NAMES
from ember.train._checkpoint.mid_round import step_directories
from ember.train._checkpoint.run_state import RUN_END
from ember.train._config import TrainingConfig
from ember.train._strategy.single import SingleDevice

__all__ = ["LOCK", "OWNED", "claim_for_run", "claim_run_directory", "used_by_a_run"]

LOCK = ".ember.lock"
"""The lock file of a run directory: the holder's pid, host and start time (JSON)."""

RUNS = ("train", "valid", "test")
"""The split log directories: their presence means a run was logged here."""

OWNED = (
    *RUNS,
    "experiment.log",
    "evaluation.log",
    "config.json",
    "summary.json",
    "metrics.png",
    "model.safetensors",  # the best epoch's export, when a logger asks for it
)
"""What ember writes directly in a run directory (beside the checkpoint directory)."""

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
    return claim_run_directory(
        config.directory,
        fresh=config.resume is None,
        overwrite=config.overwrite,
        checkpoints=checkpoints,
    )


@contextmanager
def claim_run_directory(
    directory: Path, *, fresh: bool, overwrite: bool, checkpoints: Path | None
) -> Iterator[None]:
    """Hold ``directory`` for one run (see the module doc); ``checkpoints`` is the checkpoint
    directory, if any; ``fresh``: the run starts at epoch 1 (no resume was asked for)."""
    if overwrite and not fresh:
        raise ValueError(
            "overwrite() starts the run afresh and removes the earlier run's files, but a "
            "resume was asked for too (checkpoint(epoch) or resume_latest()): drop one of them"
        )
    made = not directory.exists()
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
        if made and not any(directory.iterdir()):
            directory.rmdir()


def used_by_a_run(directory: Path, checkpoints: Path | None) -> list[str]:
    """What of another run's logs and checkpoints ``directory`` holds (names, sorted)."""
    found = [name for name in RUNS if (directory / name).is_dir()]
    files = _checkpoint_files(checkpoints)
    if checkpoints is not None and files:
        found.append(f"{_shown(directory, checkpoints)} ({len(files)} checkpoint files)")
    return sorted(found)


def _used_message(directory: Path, found: list[str]) -> str:
    return (
        f"{str(directory)!r} holds another run's logs or checkpoints ({', '.join(found)}); a "
        "fresh run there would mix its epochs with that run's. Choose one: resume that run "
        "with resume_latest(), give this run a new directory, or call overwrite() to remove "
        "what ember wrote there (its logs, checkpoints, experiment.log, config.json, "
        "summary.json; nothing else) and start afresh"
    )


def _remove_run(directory: Path, checkpoints: Path | None) -> None:
    """Remove what ember wrote in ``directory`` and ember's checkpoint files, nothing else."""
    for name in OWNED:
        path = directory / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for path in _checkpoint_files(checkpoints):
        path.unlink()
    if checkpoints is None:
        return
    for emptied in [*step_directories(checkpoints).values(), checkpoints]:
        if emptied.is_dir() and not any(emptied.iterdir()):
            emptied.rmdir()


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
