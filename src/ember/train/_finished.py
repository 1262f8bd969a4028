"""A run that already finished: the result ``resume_latest()`` returns instead of training.

``resume_latest()`` on a run complete already for what is asked (``_start.py``) returns its
result: its learner as the last epoch left it (weights, optimizer state, scheduler, restored from
the checkpoint chosen, read and verified once), its summary (``summary.json``), its stop reason
and checkpoints; nothing is trained or written.
"""

from __future__ import annotations

import logging
from typing import TypeVar

from torch import nn

from ember._rundir.end import RunEnd
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

__all__ = ["finished_result", "restore_learner"]

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("ember.train")


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
