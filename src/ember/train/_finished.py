"""A run that already finished: what ``resume_latest()`` says and returns instead of training.

A run that reached ``num_epochs`` or was stopped by early stopping records its end in its
directory (``run-end.json``, ``ember/_rundir/end.py``). ``resume_latest()`` on it, asking
for no more epochs than that run was, warns that the run is complete (in ``experiment.log`` and
through the renderer's warnings) and returns its result: its learner as the last epoch left it
(weights, optimizer state, scheduler), its summary (``summary.json``), its stop reason and
checkpoints; nothing is trained or written. Asking for more epochs (or, for a run bounded by
``max_steps``, more steps) trains on from the last one.

With no checkpoint to resume from, ``resume_latest()`` trains from scratch, and says so (a
warning naming the directory: a mistyped path is seen at once, while a preemptible script's
first launch, which has no checkpoint yet, still runs). Only a run that finished without
checkpoints is refused: there is nothing of it to resume or return, and training from scratch
in its directory would overwrite it.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from torch import nn

from ember._errors import RunDirectoryError
from ember._rundir.end import RunEnd, read_run_end
from ember._rundir.manifest import manifest_epochs
from ember._rundir.summary import read_own_summary
from ember.train._checkpoint.checkpointer import RunCheckpointer
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.resume import restore_point
from ember.train._config import TrainingConfig
from ember.train._counters import RunCounters
from ember.train._facts import Listing, run_result
from ember.train._learner import Learner
from ember.train._logger.store import EventStore
from ember.train._renderer.base import MetricsRenderer
from ember.train._result import LearningResult
from ember.train._state import CountersPart, RunState, SchedulerPart, WeightsPart
from ember.train._summary import LearnerSummary
from ember.train._tracking import run_loggers

__all__ = [
    "finished_result",
    "finished_run",
    "nothing_to_resume",
    "restore_learner",
]

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("ember.train")


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


def finished_result(
    config: TrainingConfig,
    learner: Learner[M],
    checkpointer: RunCheckpointer,
    point: ResumePoint,
    end: RunEnd,
    renderer: MetricsRenderer,
    listing: Listing,
) -> LearningResult[M]:
    """The finished run's result: its learner as it ended (weights, optimizer state, scheduler;
    the model in eval mode, from the checkpoint of ``point``, the end of round ``end.epoch``),
    its summary (``summary.json``, when the builder asks for one), the
    checkpoints of ``listing`` and its logs to read :meth:`~LearningResult.values` from."""
    restore_learner(learner, checkpointer, point)
    model = learner.model
    model.eval()
    data = read_own_summary(config.directory) if config.summary else None
    summary = None if data is None else LearnerSummary.from_json(data)
    store = EventStore(run_loggers(config))  # read only: nothing is started or written
    return run_result(
        config, learner, renderer, None, summary, end.stop_reason, end.epoch, listing, store
    )


def restore_learner(learner: Learner[M], checkpointer: RunCheckpointer, point: ResumePoint) -> None:
    """Put back everything the checkpoint of ``point`` (a round's end) holds for ``learner``:
    the weights, the optimizers' state, the scheduler and the last lr, as the run left them (a
    sharded run's shards into the plain model), through the parts a resume restores."""
    state = RunState(main=True)
    state.register("loop", CountersPart(RunCounters.starting(point.epoch + 1), learner, None))
    state.register("scheduler", SchedulerPart(learner))
    state.register("weights", WeightsPart(learner, None, checkpointer.directory))
    records = restore_point(checkpointer, point)
    state.restore(records, point, f"{point} in {checkpointer.directory}")
    learner.end_training()  # the checkpoint was taken before the run's end caught it up
