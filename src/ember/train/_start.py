"""Where a run's training starts: afresh, from a checkpoint, or not at all (a run complete
already, whose result ``_finished.py`` returns).

::

    checkpoint(epoch):   that checkpoint; it must verify before anything of the run is written
                         (refused: CheckpointError naming what is missing or damaged)
    resume_latest():     the newest usable checkpoint; the newer ones skipped are warned of in
                         experiment.log and on the screen (none usable of several:
                         CheckpointError, unless fresh_if_unusable)
        none at all:     training starts afresh, with a warning naming the directory (a
                         mistyped path is seen at once, while a preemptible script's first
                         launch, which has no checkpoint yet, still runs); a run that finished
                         without checkpoints is refused (nothing of it to resume or return, and
                         training from scratch there would overwrite it)
        a round end of a run complete already for what is asked (its run-end.json: the
                         num_epochs and max_steps it reached, or early stopping): a warning,
                         nothing is trained, the finished run's result is the launch's
                         (_finished.py); asking for more epochs or steps trains on
    otherwise:           afresh

The checkpoint chosen is read and verified once (``_checkpoint/resume.py``): the point carries
what was read to the restore, the loop's first act or a finished run's result.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ember._errors import RunDirectoryError
from ember._rundir.end import RunEnd, read_run_end
from ember._rundir.manifest import manifest_epochs
from ember.train._application_log import warnings_to
from ember.train._checkpoint.checkpointer import RunCheckpointer
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.resume import requested_point, resume_latest_point
from ember.train._config import TrainingConfig

__all__ = [
    "checkpointer_for",
    "finished_run",
    "latest_start",
    "nothing_to_resume",
    "requested_start",
]

log = logging.getLogger("ember.train")


def checkpointer_for(checkpointer: RunCheckpointer | None, who: str) -> RunCheckpointer:
    """The run's ``checkpointer``, which resuming (``who``: the builder call that asked) needs;
    ValueError naming the call otherwise."""
    if checkpointer is None:
        raise ValueError(
            "resuming needs checkpointers: call with_default_checkpointers() (or "
            f"with_checkpointers(...)) before {who}"
        )
    return checkpointer


def requested_start(checkpointer: RunCheckpointer | None, epoch: int) -> ResumePoint:
    """``checkpoint(epoch)``: that checkpoint, verified, or nothing runs."""
    return requested_point(checkpointer_for(checkpointer, "checkpoint(epoch)"), epoch)


def latest_start(
    config: TrainingConfig,
    checkpointer: RunCheckpointer | None,
    show: Callable[[str], None] | None,
) -> tuple[ResumePoint | None, RunEnd | None]:
    """``resume_latest()``: the newest usable checkpoint (None: afresh), and the recorded end
    of a run complete already for what is asked (None: it trains); the warnings reach ``show``
    (the renderer's ``on_warning``) too."""
    checkpointer = checkpointer_for(checkpointer, "resume_latest()")
    with warnings_to(show):  # skipped checkpoints: in experiment.log and on the screen
        start = resume_latest_point(checkpointer, fresh_if_unusable=config.fresh_if_unusable)
        if start is None:
            nothing_to_resume(config, checkpointer)  # a warning, or a finished run refused
            return None, None
        if start.step is not None:
            return start, None  # a run that stopped inside a round is never a finished one
        return start, finished_run(config, checkpointer, start.epoch)


def finished_run(
    config: TrainingConfig, checkpointer: RunCheckpointer, latest: int
) -> RunEnd | None:
    """The recorded end of the run whose newest complete checkpoint ``resume_latest()`` found
    is of epoch ``latest``, when it has nothing left to train for ``config.num_epochs`` and
    ``config.max_steps`` (the warning is logged); else None."""
    end = read_run_end(config.directory, checkpointer.directory, latest)
    if end is None or not end.complete_for(config.num_epochs, config.max_steps):
        return None
    how = f"stopped early ({end.stop_reason})" if end.stop_reason else "reached its last epoch"
    asked = f"num_epochs={end.num_epochs}"
    more = f"more epochs (num_epochs({end.num_epochs + 1}) or more)"
    if end.max_steps is not None:
        asked += f", max_steps={end.max_steps}"
        more += f" or more steps (max_steps({end.max_steps + 1}) or more)"
    log.warning(
        "resume_latest(): the run in %s is complete: it %s after epoch %d of %s; nothing is "
        "trained and its result is returned. To train on, ask for %s; for a new run, use a "
        "new directory or overwrite()",
        config.directory,
        how,
        end.epoch,
        asked,
        more,
    )
    return end


def nothing_to_resume(config: TrainingConfig, checkpointer: RunCheckpointer) -> None:
    """``resume_latest()`` found no checkpoint to resume from (see the module doc): refuse a
    run that finished without checkpoints; else warn that training starts from scratch."""
    checkpoints = checkpointer.directory
    if manifest_epochs(checkpoints):  # unusable ones, and fresh_if_unusable: warned of already
        return
    end = read_run_end(config.directory, None, None)
    if end is not None:
        raise RunDirectoryError(
            f"resume_latest(): the run in {str(config.directory)!r} finished (epoch "
            f"{end.epoch}, num_epochs={end.num_epochs}) without checkpoints, so there is "
            "nothing to resume from, and training from scratch there would overwrite it. For a "
            "new run, drop resume_latest() (a fresh run goes to a free sibling directory) or "
            "call overwrite() instead; a run that is to be resumed keeps checkpoints "
            "(with_default_checkpointers())"
        )
    log.warning(
        "resume_latest(): no checkpoint in %s to resume from: training starts from scratch, "
        "at epoch 1 (if a run should be there, check the directory's name)",
        checkpoints,
    )
