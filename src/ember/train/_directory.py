"""The run directory a launch writes: chosen and claimed in one step, held by one process at a
time, never mixed with another run.

::

    claim_for_run(config):             (yields config with the directory its run writes)
        refused on every process: overwrite() with a resume; versioned() with overwrite(),
            exact_directory(), a checkpointer with a directory of its own, or in a job of several
            processes (each would pick its own version)
        the processes that do not write the directory (DDP ranks other than 0): config as it is
        versioned(), a fresh run:  DIR/version_N, N one more than the highest version there (0
            for the first), claimed by making it (os.mkdir: one made meanwhile by another launch
            is taken, and the next N is tried)
        versioned(), a resume:     the highest version (version_0 when there is none yet)
        otherwise:                 DIR (made when missing)
        take its lock: LOCK, created with O_EXCL, holding {"pid", "host", "started"}
            held by a live process, or by another host:  RunDirectoryError naming pid and host
                                                        (a directory in use is never left for
                                                        another: the second launch is refused)
            left by a dead process of this host:         taken over, with a warning
        a fresh run (no resume) into a directory that holds an earlier run (used_by_a_run: its
        logs, checkpoints, config.json, summary.json or run-end.json):
            overwrite():  remove what ember wrote (OWNED, the split logs, the checkpoint files),
                          nothing else: a file of the user's inside train/ stays
            exact_directory(), a checkpointer with a directory of its own (every run writes it),
            a job of several processes (each would choose its own directory):
                          RunDirectoryError naming what is there and the choices
            otherwise:    DIR released, untouched; the run goes to the first free sibling
                          DIR-2, DIR-3, ..., claimed by making it as a version is
        ... the run ...
        release the lock (also after an error); the directories the claim made and nothing was
        written to are removed again (a launch refused before training leaves nothing behind)

What of a directory is ember's, what means a run was launched there, and what ``overwrite()``
removes is the run directory's layout (``ember/_rundir/layout.py``).

Two runs never share a directory, so running the same training twice puts the second beside the
first (Lightning's ``version_N`` habit, for a directory the user named): a script or a notebook
cell runs again unchanged, and the first run's files are never touched. ``versioned()`` puts
every run in ``DIR/version_N`` from the first on, and ``resume_latest()`` with it goes on in the
newest version. Making a directory is atomic, so two launches that start at the same moment never
pick the same one.
"""

from __future__ import annotations

import dataclasses
import datetime
import itertools
import json
import os
import re
import socket
import warnings
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from ember._errors import RunDirectoryError
from ember._rundir.layout import LOCK, remove_run, used_by_a_run
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._strategy.single import SingleDevice

__all__ = [
    "VERSION",
    "claim_for_run",
    "claim_new",
    "siblings",
    "versions",
]

VERSION = "version_{}"
"""The name of a version of a ``versioned()`` run directory."""

_VERSION = re.compile(r"version_(0|[1-9][0-9]*)")


@contextmanager
def claim_for_run(config: TrainingConfig) -> Iterator[TrainingConfig]:
    """Choose and hold the directory of ``config``'s run for the block (see the module doc);
    yields ``config`` with that directory (and its ``experiment.log``, when that is the
    default)."""
    _check_choices(config)
    if not (config.strategy or SingleDevice()).is_main:
        yield config
        return
    with ExitStack() as held:
        yield _moved(config, _claim(config, held))


def _claim(config: TrainingConfig, held: ExitStack) -> Path:
    """The directory the run writes, held (made, locked) until ``held`` closes."""
    if config.versioned and config.resume is None:
        return claim_new(versions(config.directory), held)
    directory = _newest_version(config.directory) if config.versioned else config.directory
    with ExitStack() as claim:
        claim.enter_context(_held(directory))
        checkpoints = _checkpoints(config, directory)
        found = used_by_a_run(directory, checkpoints) if config.resume is None else []
        if not found or config.overwrite:
            if found:
                remove_run(directory, checkpoints)
            held.enter_context(claim.pop_all())  # held for the run
            return directory
        _check_movable(config, directory, checkpoints, found)  # refused where it cannot move
    return claim_new(siblings(directory), held)  # the earlier run's directory released


def claim_new(candidates: Iterable[Path], held: ExitStack) -> Path:
    """The first of ``candidates`` this process makes, held until ``held`` closes: making the
    directory is the claim (``os.mkdir`` is atomic), so one another launch made between the
    scan that listed it and the claim is passed over for the next."""
    for candidate in candidates:
        try:
            return held.enter_context(_held(candidate, new=True))
        except FileExistsError:  # taken since the scan (or a file of that name)
            continue
    raise RunDirectoryError("every candidate run directory was taken by other launches")


def versions(directory: Path) -> Iterator[Path]:
    """``directory/version_N`` from N one more than the highest version there now (0 for the
    first) on: where a fresh ``versioned()`` run goes."""
    return (directory / VERSION.format(n) for n in itertools.count(_highest(directory) + 1))


def siblings(directory: Path) -> Iterator[Path]:
    """``DIR-2``, ``DIR-3``, ... beside ``directory``: where a fresh run goes when the directory
    holds an earlier run (``.`` and ``..`` are named by their absolute path)."""
    if directory.name in ("", ".."):
        directory = directory.resolve()
    return (directory.with_name(f"{directory.name}-{n}") for n in itertools.count(2))


def _highest(directory: Path) -> int:
    """The highest N of the ``version_N`` directories in ``directory``; -1 without any."""
    return max(
        (
            int(found[1])
            for path in (directory.iterdir() if directory.is_dir() else ())
            if (found := _VERSION.fullmatch(path.name)) and path.is_dir()
        ),
        default=-1,
    )


def _newest_version(directory: Path) -> Path:
    """The version a ``versioned()`` resume goes on in: the highest, or version_0."""
    return directory / VERSION.format(max(_highest(directory), 0))


def _moved(config: TrainingConfig, directory: Path) -> TrainingConfig:
    """``config`` with its run in ``directory``, and its ``experiment.log`` when that is the
    default (the run's own)."""
    if directory == config.directory:
        return config
    log = config.application_log
    if log == config.directory / "experiment.log":
        log = directory / "experiment.log"
    return dataclasses.replace(config, directory=directory, application_log=log)


def _checkpoints(config: TrainingConfig, directory: Path) -> Path | None:
    """The checkpoint directory of the run in ``directory``, if it has checkpointers."""
    checkpointer = config.checkpointer
    if isinstance(checkpointer, str):  # DEFAULT_CHECKPOINTERS
        return directory / "checkpoint"
    return None if checkpointer is None else checkpointer.directory


@contextmanager
def _held(directory: Path, *, new: bool = False) -> Iterator[Path]:
    """``directory`` made (``new``: it must not exist, else FileExistsError) and locked for the
    block; then the lock released, and what was made removed again if nothing was written."""
    made = _outermost_missing(directory)
    directory.mkdir(parents=True, exist_ok=not new)
    try:
        lock = directory / LOCK
        mine = _acquire(lock)
        try:
            yield directory
        finally:
            _release(lock, mine)
    finally:
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


def _check_movable(
    config: TrainingConfig, directory: Path, checkpoints: Path | None, found: list[str]
) -> None:
    """Refuse a fresh run into ``directory``, which holds an earlier run (``found``), when it
    cannot go to a free sibling directory instead (see the module doc)."""
    processes = _processes()
    if config.exact_directory:
        why = "exact_directory() keeps this run there"
        new = "drop exact_directory() (a fresh run then goes to a free sibling directory)"
    elif checkpoints is not None and not isinstance(config.checkpointer, str):
        why = (
            f"the checkpointer given to with_checkpointers() writes {str(checkpoints)!r} for "
            "every run, so this run cannot go to a free sibling directory"
        )
        new = "give this run (and its checkpointer) a new directory"
    elif processes > 1:
        why = (
            f"this job has {processes} processes (WORLD_SIZE), which would each choose their "
            "own free sibling directory"
        )
        new = "give every process a new directory, chosen before they start"
    else:
        return
    raise RunDirectoryError(
        f"{str(directory)!r} holds another run's logs or checkpoints ({', '.join(found)}), and "
        f"{why}: a fresh run there would mix its epochs with that run's. Choose one: resume "
        f"that run with resume_latest(), {new}, or call overwrite() to remove what ember "
        "wrote there (its logs, checkpoints, experiment.log, config.json, summary.json; "
        "nothing else) and start afresh"
    )


def _check_choices(config: TrainingConfig) -> None:
    """Refuse what contradicts itself: overwrite() with a resume, and what a new directory per
    launch contradicts (``versioned()`` with overwrite(), exact_directory(), a checkpointer with
    a directory of its own, or several processes: each would pick its own)."""
    if config.overwrite and config.resume is not None:
        raise ValueError(
            "overwrite() starts the run afresh and removes the earlier run's files, but a "
            "resume was asked for too (checkpoint(epoch) or resume_latest()): drop one of them"
        )
    if not config.versioned:
        return
    if config.overwrite or config.exact_directory:
        which = (
            "overwrite() has nothing to remove"
            if config.overwrite
            else "exact_directory() keeps it in the one given"
        )
        raise ValueError(
            f"versioned() gives every fresh run a new directory, so {which}: drop one of them"
        )
    checkpointer = config.checkpointer
    if checkpointer is not None and checkpointer != DEFAULT_CHECKPOINTERS:
        raise ValueError(
            "versioned() gives every run a new directory, but the checkpointer given to "
            f"with_checkpointers() writes {str(getattr(checkpointer, 'directory', '?'))!r} for "
            "all of them: use with_default_checkpointers() (and with_checkpointing_strategy() "
            "for which epochs to keep), or give each run its directory yourself"
        )
    processes = _processes()
    if processes > 1:
        raise ValueError(
            f"versioned() picks the version in each process, and this job has {processes} "
            "(WORLD_SIZE): they could pick different ones. Give the run directory itself, "
            "chosen once before the processes start"
        )


def _processes() -> int:
    """The number of processes of this job, as torchrun (and ember.distributed.spawn) tell it
    in ``WORLD_SIZE``: a directory chosen here would be chosen by each of them."""
    world = os.environ.get("WORLD_SIZE", "1")
    return int(world) if world.isdigit() else 1


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
