"""Where ``resume_latest()`` starts, and what it says about the checkpoints it cannot use.

The newest complete epoch is resumed from. Every newer epoch that has checkpoint files but is
damaged or incomplete is reported as a warning (on the ``ember`` logger, so in
``experiment.log``), naming the file and what is wrong, and saying that the resumed run will
write that epoch again. When checkpoints exist but none is usable, the run is refused
(:class:`~ember.CheckpointError` listing each one) unless the user asked for a fresh run with
``resume_latest(fresh_if_unusable=True)``; then a warning says which damaged epochs the new
run will overwrite. A damaged checkpoint is never overwritten without a warning first.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from ember._errors import CheckpointError
from ember.train._checkpoint.file import SUFFIX
from ember.train._checkpoint.learning import NAMES, RunCheckpointer
from ember.train._checkpoint.manifest import epoch_problem, manifest_epochs

__all__ = ["resume_latest_epoch"]

log = logging.getLogger("ember.train")
_FILE_RE = re.compile(
    rf"(?:manifest-([1-9][0-9]*)\.json|(?:{'|'.join(NAMES)})-([1-9][0-9]*){re.escape(SUFFIX)})"
)


def resume_latest_epoch(checkpointer: RunCheckpointer, *, fresh_if_unusable: bool) -> int:
    """The first epoch to train for ``resume_latest()`` (see the module doc)."""
    latest = checkpointer.latest_complete_epoch()
    directory = checkpointer.directory
    skipped = [e for e in _checkpointed_epochs(directory) if latest is None or e > latest]
    problems = [_problem(directory, epoch) for epoch in skipped]
    committed = set(manifest_epochs(directory))  # files without a manifest: an interrupted save
    if latest is None and committed and not fresh_if_unusable:
        raise CheckpointError(
            f"resume_latest() found checkpoints in {directory} but none is usable:\n"
            + "\n".join(
                f"  - epoch {e}: {problem}" for e, problem in zip(skipped, problems, strict=True)
            )
            + "\nrepair or move them away, or call resume_latest(fresh_if_unusable=True) to "
            "train from epoch 1 (the new run then overwrites these epochs)"
        )
    for epoch, problem in zip(skipped, problems, strict=True):
        log.warning(
            "resume_latest() skips the checkpoint of epoch %d: %s; this run trains epoch %d "
            "again and overwrites that checkpoint",
            epoch,
            problem,
            epoch,
        )
    if latest is None and committed:
        log.warning(
            "resume_latest(fresh_if_unusable=True): no checkpoint in %s is usable, training "
            "starts at epoch 1",
            directory,
        )
    return 1 if latest is None else latest + 1


def _checkpointed_epochs(directory: Path) -> list[int]:
    """Epochs with any file of a checkpoint in ``directory`` (a manifest or a record)."""
    if not directory.is_dir():
        return []
    names = (_FILE_RE.fullmatch(path.name) for path in directory.iterdir())
    return sorted({int(match.group(1) or match.group(2)) for match in names if match})


def _problem(directory: Path, epoch: int) -> str:
    problem = epoch_problem(directory, epoch, NAMES)
    return "it is incomplete" if problem is None else str(problem)
