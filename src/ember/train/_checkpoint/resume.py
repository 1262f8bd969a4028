"""Where ``resume_latest()`` starts, and what it says about the checkpoints it cannot use; where
``checkpoint(epoch)`` starts; the chosen checkpoint's records, for the restore.

The newest complete checkpoint is resumed from: a round end, or a mid-round checkpoint
(``mid_round.py``) when the checkpointer takes them. Every newer checkpoint that has files but
is damaged or incomplete is reported as a warning (on the ``ember`` logger, so in
``experiment.log``), naming the file and what is wrong, and saying that the resumed run will
write that epoch again. When checkpoints exist but none is usable, the run is refused
(:class:`~ember.CheckpointError` listing each one) unless the user asked for a fresh run with
``resume_latest(fresh_if_unusable=True)``; then a warning says which damaged epochs the new
run will overwrite. A damaged checkpoint is never overwritten without a warning first.

With ember's checkpointer (``LearningCheckpointer``) the chosen checkpoint is read and verified
once, as it is chosen: the point returned is a :class:`~.mid_round.VerifiedPoint`, whose
records the restore parses without reading its manifest or hashing its files again
(:func:`restore_point`). Another checkpointer says which point is complete, and reads it when
the run restores it.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from ember._errors import CheckpointError
from ember._rundir.checkpoints import RECORDS, SUFFIX, step_directories
from ember._rundir.manifest import manifest_epochs, manifest_path
from ember.train._checkpoint.checkpointer import (
    MidRoundCheckpointer,
    RunCheckpointer,
    TrainingRecords,
)
from ember.train._checkpoint.learning import LearningCheckpointer, restore_verified
from ember.train._checkpoint.mid_round import (
    ResumePoint,
    VerifiedPoint,
    latest_verified_point,
    point_directory,
    point_problem,
    verify_point,
)

__all__ = ["requested_point", "restore_point", "resume_latest_point"]

log = logging.getLogger("ember.train")
_FILE_RE = re.compile(
    rf"(?:manifest-([1-9][0-9]*)\.json|(?:{'|'.join(RECORDS)})-([1-9][0-9]*){re.escape(SUFFIX)})"
)


def resume_latest_point(
    checkpointer: RunCheckpointer, *, fresh_if_unusable: bool
) -> ResumePoint | None:
    """The checkpoint ``resume_latest()`` resumes from, None for a fresh run (see the module
    doc)."""
    directory = checkpointer.directory
    latest, problems = _latest_point(checkpointer)
    skipped = [
        point
        for point in _checkpointed_points(directory, isinstance(checkpointer, MidRoundCheckpointer))
        if latest is None or point.order > latest.order
    ]
    found = [_problem(directory, point, problems) for point in skipped]
    committed = set(manifest_epochs(directory))  # files without a manifest: an interrupted save
    if latest is None and committed and not fresh_if_unusable:
        raise CheckpointError(
            f"resume_latest() found checkpoints in {directory} but none is usable:\n"
            + "\n".join(
                f"  - {point}: {problem}" for point, problem in zip(skipped, found, strict=True)
            )
            + "\nrepair or move them away, or call resume_latest(fresh_if_unusable=True) to "
            "train from epoch 1 (the new run then overwrites these epochs)"
        )
    for point, problem in zip(skipped, found, strict=True):
        log.warning(
            "resume_latest() skips the checkpoint of %s: %s; this run trains epoch %d "
            "again and overwrites that checkpoint",
            point,
            problem,
            point.epoch,
        )
    if latest is None and committed:
        log.warning(
            "resume_latest(fresh_if_unusable=True): no checkpoint in %s is usable, training "
            "starts at epoch 1",
            directory,
        )
    return latest


def requested_point(checkpointer: RunCheckpointer, epoch: int) -> ResumePoint:
    """The checkpoint ``checkpoint(epoch)`` resumes from, verified before anything of the run
    is written (a refused request leaves the run directory as it was; ember's checkpointer's
    read once, see the module doc); CheckpointError naming what is missing or damaged and the
    complete epochs otherwise."""
    directory, point = checkpointer.directory, ResumePoint(epoch)
    if not manifest_path(directory, epoch).exists():
        problem = "there is none"
    else:
        keep = RECORDS if isinstance(checkpointer, LearningCheckpointer) else ()
        try:
            verified = verify_point(directory, point, RECORDS, keep)
        except CheckpointError as found:
            problem = str(found)
        else:
            return verified if keep else point
    raise CheckpointError(
        f"no complete checkpoint of epoch {epoch} in {directory} ({problem}); complete "
        f"epochs: {checkpointer.complete_epochs()}"
    )


def restore_point(checkpointer: RunCheckpointer, point: ResumePoint) -> TrainingRecords:
    """The records of ``point``, the checkpoint a run starts from: parsed from what choosing it
    read and verified (a :class:`VerifiedPoint` of ember's checkpointer), else read by the
    checkpointer now (CheckpointError when it cannot restore a mid-round checkpoint)."""
    if isinstance(point, VerifiedPoint) and isinstance(checkpointer, LearningCheckpointer):
        return restore_verified(checkpointer, point)
    if point.step is None:
        return checkpointer.restore(point.epoch)
    if isinstance(checkpointer, MidRoundCheckpointer):
        return checkpointer.restore_mid_round(point.epoch, point.step)
    where = f"{point} in {point_directory(checkpointer.directory, point)}"
    raise CheckpointError(
        f"{checkpointer!r} cannot restore the checkpoint of {where}: it has no mid-round "
        "checkpoints"
    )


def _latest_point(
    checkpointer: RunCheckpointer,
) -> tuple[ResumePoint | None, dict[ResumePoint, CheckpointError]]:
    """The newest complete checkpoint (ember's checkpointer's read and verified once), and the
    problems found with newer ones on the way."""
    if isinstance(checkpointer, LearningCheckpointer):
        return latest_verified_point(checkpointer.directory, RECORDS)
    if isinstance(checkpointer, MidRoundCheckpointer):
        return checkpointer.latest_complete_point(), {}
    epoch = checkpointer.latest_complete_epoch()
    return (None if epoch is None else ResumePoint(epoch)), {}


def _checkpointed_points(directory: Path, mid_round: bool) -> list[ResumePoint]:
    """Checkpoints with any file in ``directory`` (a manifest or a record), of either kind."""
    points = [ResumePoint(epoch) for epoch in _checkpointed_epochs(directory)]
    if mid_round:
        for step, path in step_directories(directory).items():
            points += [ResumePoint(epoch, step) for epoch in _checkpointed_epochs(path)]
    return sorted(points, key=lambda point: point.order)


def _checkpointed_epochs(directory: Path) -> list[int]:
    """Epochs with any file of a checkpoint in ``directory`` (a manifest or a record)."""
    if not directory.is_dir():
        return []
    names = (_FILE_RE.fullmatch(path.name) for path in directory.iterdir())
    return sorted({int(match.group(1) or match.group(2)) for match in names if match})


def _problem(directory: Path, point: ResumePoint, found: dict[ResumePoint, CheckpointError]) -> str:
    """What is wrong with the checkpoint of ``point`` (as met choosing the latest, else
    verified now)."""
    problem = found.get(point) or point_problem(directory, point, RECORDS)
    return "it is incomplete" if problem is None else str(problem)
