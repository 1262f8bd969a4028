"""Where a run's training starts: afresh, from a checkpoint, or not at all (a run complete
already).

::

    checkpoint(epoch):   that checkpoint; it must verify before anything of the run is written
                         (refused: CheckpointError naming what is missing or damaged)
    resume_latest():     the newest usable checkpoint; the newer ones skipped are warned of in
                         experiment.log and on the screen (none usable of several:
                         CheckpointError, unless fresh_if_unusable)
        none at all:     training starts afresh, with a warning; a run that finished without
                         checkpoints is refused (_finished.py)
        a round end of a run complete already for what is asked: nothing is trained, the
                         finished run's result is the launch's (_finished.py)
    otherwise:           afresh

The checkpoint chosen is read and verified once (``_checkpoint/resume.py``): the point carries
what was read to the restore, the loop's first act or a finished run's result.
"""

from __future__ import annotations

from collections.abc import Callable

from ember._rundir.end import RunEnd
from ember.train._application_log import warnings_to
from ember.train._checkpoint.checkpointer import RunCheckpointer
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.resume import requested_point, resume_latest_point
from ember.train._finished import finished_run, nothing_to_resume
from ember.train._plan import RunPlan

__all__ = ["checkpointer_for", "latest_start", "requested_start"]


def checkpointer_for(plan: RunPlan, who: str) -> RunCheckpointer:
    """The run's checkpointer, which resuming (``who``: the builder call that asked) needs;
    ValueError naming the call otherwise."""
    checkpointer = plan.checkpointer
    if checkpointer is None:
        raise ValueError(
            "resuming needs checkpointers: call with_default_checkpointers() (or "
            f"with_checkpointers(...)) before {who}"
        )
    return checkpointer


def requested_start(plan: RunPlan, epoch: int) -> ResumePoint:
    """``checkpoint(epoch)``: that checkpoint, verified, or nothing runs."""
    return requested_point(checkpointer_for(plan, "checkpoint(epoch)"), epoch)


def latest_start(
    plan: RunPlan, show: Callable[[str], None] | None
) -> tuple[ResumePoint | None, RunEnd | None]:
    """``resume_latest()``: the newest usable checkpoint (None: afresh), and the recorded end
    of a run complete already for what is asked (None: it trains); the warnings reach ``show``
    (the renderer's ``on_warning``) too."""
    config, checkpointer = plan.config, checkpointer_for(plan, "resume_latest()")
    with warnings_to(show):  # skipped checkpoints: in experiment.log and on the screen
        start = resume_latest_point(checkpointer, fresh_if_unusable=config.fresh_if_unusable)
        if start is None:
            nothing_to_resume(config, checkpointer)  # a warning, or a finished run refused
            return None, None
        if start.step is not None:
            return start, None  # a run that stopped inside a round is never a finished one
        return start, finished_run(config, checkpointer, start.epoch)
