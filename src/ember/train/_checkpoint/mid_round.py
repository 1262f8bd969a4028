"""Mid-round checkpoints: where they are, which are complete, and the newest point a run can
resume from, of either kind.

A round-end checkpoint of round ``e`` is the files ``*-{e}.safetensors`` and ``manifest-{e}.json``
in the checkpoint directory (``learning.py``). A *mid-round* checkpoint, taken at an optimizer
step inside round ``e`` (``checkpoint_every(steps=N | seconds=T)``, or a stop inside a round),
is the same files, named for the round under way, in a directory of its own named for the
optimizer steps the run had taken::

    checkpoint/step-{k}/{model,optim,scheduler,state}-{e}.safetensors
    checkpoint/step-{k}/manifest-{e}.json          written last: commits the checkpoint

so everything that writes, verifies and reads a round-end checkpoint (atomic files, SHA-256
manifests, a sharded run's shard files) serves it unchanged, and every tool that lists round-end
checkpoints (``ember export``, ``load_checkpoint``, the best epoch) never mistakes one for a
round end. They are ordered by when they were taken: step ``k`` of round ``e`` comes after the
end of round ``e - 1`` and before the end of round ``e`` (:attr:`ResumePoint.order`).

The checkpoint a run starts from is read and verified once, when it is chosen
(:func:`verify_point`): its manifest read, every file it lists checked, the record files' bytes
kept as they were hashed. The chosen point carries them (:class:`VerifiedPoint`) to the restore,
which parses them as they are.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from ember._errors import CheckpointError
from ember._rundir.checkpoints import (
    checkpoint_file_name,
    mid_round_directory,
    read_header,
    read_metadata,
    step_directories,
)
from ember._rundir.manifest import (
    Manifest,
    delete_manifest,
    manifest_epochs,
    read_manifest,
    verify_manifest,
)

__all__ = [
    "ResumePoint",
    "VerifiedPoint",
    "all_points",
    "delete_mid_round",
    "is_complete_point",
    "latest_complete_point",
    "latest_verified_point",
    "mid_round_points",
    "point_directory",
    "point_problem",
    "verify_point",
]

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ResumePoint:
    """A checkpoint a run can resume from: the end of round ``epoch`` (``step`` None), or the
    optimizer step ``step`` inside round ``epoch``."""

    epoch: int
    step: int | None = None

    @property
    def starting_epoch(self) -> int:
        """The round a run resumed here trains first (from its start, or from the step)."""
        return self.epoch if self.step is not None else self.epoch + 1

    @property
    def order(self) -> tuple[int, int]:
        """Sorts points by when they were taken (a mid-round one after the round before)."""
        return (self.epoch, 0) if self.step is None else (self.epoch - 1, self.step)

    def __str__(self) -> str:
        if self.step is None:
            return f"epoch {self.epoch}"
        return f"step {self.step} (in epoch {self.epoch})"


@dataclass(frozen=True, slots=True, eq=False)
class VerifiedPoint(ResumePoint):
    """A checkpoint chosen to start from, and what choosing it verified: its ``manifest``, read
    once, and the bytes of its record files by name (``"model"``, ``"state"``...), each hashed as
    it was read and found as the manifest lists it. The restore takes the bytes (:meth:`take`)
    and parses them: nothing is read or hashed again, and nothing of them is held once taken."""

    manifest: Manifest = field(kw_only=True, repr=False)
    files: dict[str, bytes] = field(kw_only=True, repr=False)

    def __eq__(self, other: object) -> bool:
        """The same point as ``other``, verified or not (what was read is no part of it)."""
        if not isinstance(other, ResumePoint):
            return NotImplemented
        return (self.epoch, self.step) == (other.epoch, other.step)

    def __hash__(self) -> int:
        return hash((self.epoch, self.step))  # as a ResumePoint's: equal points hash alike

    def take(self) -> dict[str, bytes]:
        """The record files' bytes, handed over once: a run holds no copy while it trains."""
        files = dict(self.files)
        self.files.clear()
        return files


def mid_round_points(directory: Path) -> list[ResumePoint]:
    """Every mid-round checkpoint in ``directory`` with a manifest (complete or not), in order."""
    points = [
        ResumePoint(epoch, step)
        for step, path in step_directories(directory).items()
        for epoch in manifest_epochs(path)
    ]
    return sorted(points, key=lambda point: point.order)


def point_directory(directory: Path, point: ResumePoint) -> Path:
    """Where the files of ``point`` are."""
    return directory if point.step is None else mid_round_directory(directory, point.step)


def verify_point(
    directory: Path, point: ResumePoint, required: Collection[str], keep: Collection[str] = ()
) -> VerifiedPoint:
    """The checkpoint of ``point`` verified (see the module doc), the bytes of the record files
    named in ``keep`` kept; CheckpointError when it cannot be resumed from: a file that does not
    verify against its manifest, or a state file that records another point (a ``step-{k}``
    directory renamed or copied, so its name contradicts its contents)."""
    where = point_directory(directory, point)
    epoch = point.epoch
    manifest = read_manifest(where, epoch)
    names = {checkpoint_file_name(name, epoch): name for name in keep}
    kept = verify_manifest(where, manifest, required, keep=names)
    files = {names[file_name]: data for file_name, data in kept.items()}
    if "state" in required:
        _check_step(where, point, files.get("state"))
    return VerifiedPoint(point.epoch, point.step, manifest=manifest, files=files)


def _check_step(where: Path, point: ResumePoint, state: bytes | None) -> None:
    """CheckpointError when the state file in ``where`` (its bytes ``state``, when read
    already) records another point than ``point``."""
    path = where / checkpoint_file_name("state", point.epoch)
    # the run's state records the step of a mid-round checkpoint (``_state/parts.py``); a state that
    # records none (another writer's records) is taken at its directory's word
    if state is None:
        metadata = read_metadata(path, "state", point.epoch)
    else:
        metadata = read_header(state, path, "state", point.epoch)
    step = metadata.get("step", point.step)
    if step != point.step:
        held = "a round end" if step is None else f"step {step}"
        raise CheckpointError(
            f"checkpoint file {path} holds {held}, not {point}: its directory was renamed or copied"
        )


def point_problem(
    directory: Path, point: ResumePoint, required: Collection[str]
) -> CheckpointError | None:
    """Why the checkpoint of ``point`` cannot be resumed from (None when it can: see
    :func:`verify_point`)."""
    try:
        verify_point(directory, point, required)
    except CheckpointError as error:
        return error
    return None


def is_complete_point(directory: Path, point: ResumePoint, required: Collection[str]) -> bool:
    """Whether the checkpoint of ``point`` verifies against its manifest and its state file
    records that point."""
    problem = point_problem(directory, point, required)
    if problem is not None:
        _log.info("the checkpoint of %s is not usable: %s", point, problem)
    return problem is None


def all_points(directory: Path) -> list[ResumePoint]:
    """Every checkpoint of either kind in ``directory`` with a manifest, newest first."""
    points = [ResumePoint(epoch) for epoch in manifest_epochs(directory)]
    points += mid_round_points(directory)
    return sorted(points, key=lambda point: point.order, reverse=True)


def latest_complete_point(directory: Path, required: Collection[str]) -> ResumePoint | None:
    """The newest complete checkpoint of either kind, or None; hashes only from the newest down
    to the first that verifies."""
    return next(
        (point for point in all_points(directory) if is_complete_point(directory, point, required)),
        None,
    )


def latest_verified_point(
    directory: Path, required: Collection[str]
) -> tuple[VerifiedPoint | None, dict[ResumePoint, CheckpointError]]:
    """The newest complete checkpoint of either kind, read and verified once with the bytes of
    its ``required`` record files kept (:func:`verify_point`), or None; and why each newer one
    is not usable. Reads only from the newest down to the first that verifies."""
    problems: dict[ResumePoint, CheckpointError] = {}
    for point in all_points(directory):
        try:
            return verify_point(directory, point, required, keep=required), problems
        except CheckpointError as problem:
            _log.info("the checkpoint of %s is not usable: %s", point, problem)
            problems[point] = problem
    return None, problems


def delete_mid_round(directory: Path, step: int) -> None:
    """Remove the mid-round checkpoint at ``step``: its manifests first (so a crash leaves an
    incomplete checkpoint, never a half-valid one), then its directory."""
    path = mid_round_directory(directory, step)
    for epoch in manifest_epochs(path):
        delete_manifest(path, epoch)
    shutil.rmtree(path, ignore_errors=True)
