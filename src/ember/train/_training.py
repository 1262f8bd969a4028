"""``launch``: a configured run trained, top-down — plan, session, loop.

::

    launch(config, learner):
        if config.seed is not None:  # before anything random the run does, setup() included
        seed_everything(config.seed)
    config = debugging_run(with_data(config))
    plan = plan_run(config, learner)       # pure: what will run, or a refusal (_plan.py)
        with Ctrl-C, SIGTERM, SIGUSR1 routed to the interrupter (_signals.py):
            with TrainingSession(plan, learner):   # the directory chosen and locked (the
                                                   # plan moved there), experiment.log
                                                   # (an attempt's lines), the renderer, the
                                                   # loggers and config.json, the metrics
                                                   # thread, where training starts; and the
                                                   # run's guaranteed ending (_session.py)
                unless the run is complete already (resume_latest()):
                    with the strategy's run (the model and loaders placed, _strategy/):
                        TrainingLoop(...).execute()      # the rounds (_loop.py)
            a preemption signal (SIGTERM, SIGUSR1) and no error: SystemExit(75), requeued
        the result, or TrainingError raised from the run's error (errors_in_result(): returned)

What ``launch`` raises itself is refused before training starts: a bad learner or
configuration (``_plan.py``), a directory in use, a missing checkpoint, or ``resume_latest()``
finding only unusable checkpoints. An error during training is raised as ``TrainingError``
only after the run is finished: logs flushed, checkpoints written, ``experiment.log`` holding
the traceback.
"""

from __future__ import annotations

from typing import TypeVar

from torch import nn

from ember._errors import TrainingError
from ember.train._checkpoint.rng import seed_everything
from ember.train._config import TrainingConfig
from ember.train._data_module import with_data
from ember.train._debugging import debugging_run
from ember.train._learner import Learner
from ember.train._loop import TrainingLoop
from ember.train._plan import plan_run
from ember.train._result import LearningResult
from ember.train._session import TrainingSession
from ember.train._signals import graceful_stop

__all__ = ["launch"]

M = TypeVar("M", bound=nn.Module)


def launch(config: TrainingConfig, learner: Learner[M]) -> LearningResult[M]:
    """Train ``learner`` as ``config`` says (see the module doc for the order of things)."""
    if not isinstance(learner, Learner):
        raise TypeError(f"launch needs a Learner, got {type(learner).__name__}")
    if config.seed is not None:  # before anything random the run does, setup() included
        seed_everything(config.seed)
    config = debugging_run(with_data(config))
    plan = plan_run(config, learner)
    with graceful_stop(config.interrupter) as signals:  # the whole launch, its ending too
        with TrainingSession(plan, learner) as session:
            plan = session.plan  # in the directory the session claimed
            if session.finished is None:
                with session.placed() as run:
                    loop = TrainingLoop(
                        plan,
                        learner,
                        run,
                        session.counters,
                        session.processor,
                        session.store,
                        session.start,
                    )
                    session.ended(loop.execute())
        result = session.result
        assert result is not None  # the session always ends with one
        signals.requeue_if_preempted(failed=result.error is not None)
    if result.error is None or config.errors_in_result:
        return result
    # the message does not repeat the error's: Python prints its traceback above this one
    raise TrainingError(
        f"training failed after {result.last_epoch} complete epoch(s), with the "
        f"{type(result.error).__name__} this error is raised from. The result is on this "
        "error's `.result`; call errors_in_result() on the builder to have launch return it "
        "instead",
        result,
    ) from result.error
