"""A run's result, built: the facts it ends with and the ``LearningResult`` made of them.

::

    facts, when training ended without an error (TrainingSession.ended):
        the summary table: each summarised metric's epoch values read back, the model
            described, written to summary.json (the main process, with .summary())
        the checkpoints (each round's model file) and the best epoch, listed once the
            checkpoint writes are done
        every process takes the main process's (another rank reading the directory could find
            an older checkpoint newest)
    the result (TrainingSession's ending, or a finished run's, _finished.py):
        the model, the renderer, the run's error, the summary, the stop reason, the rounds
        completed (less the round a failed metrics thread left unlogged), the directory, the
        checkpoints and best epoch, the loggers that read back the values
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from ember._errors import CheckpointError
from ember._rundir.best_epoch import best_epoch
from ember._rundir.summary import write_summary
from ember.train._checkpoint.checkpointer import RunCheckpointer
from ember.train._checkpoint.export import model_checkpoints
from ember.train._config import TrainingConfig
from ember.train._learner import Learner
from ember.train._logger.store import EventStore
from ember.train._metric.base import Numeric
from ember.train._processor import AsyncProcessorTraining
from ember.train._renderer.base import MetricsRenderer
from ember.train._result import LearningResult, metric_names
from ember.train._strategy.base import StrategyRun
from ember.train._summary import LearnerSummary, describe_model
from ember.train._valid_sets import set_metrics

__all__ = [
    "Listing",
    "agreed_facts",
    "checkpoint_listing",
    "complete_rounds",
    "run_result",
    "summary_written",
]

M = TypeVar("M", bound=nn.Module)
log = logging.getLogger("ember.train")

Listing = tuple[dict[int, Path], int | None]
"""A run's checkpointed model files by round, and its best round."""


def summary_written(
    config: TrainingConfig,
    learner: Learner[Any],
    store: EventStore,
    last_round: int,
    stop_reason: str | None,
) -> LearnerSummary:
    """The run's summary table, from the epoch values its loggers read back (every validation
    set's: ``Loss (noisy)`` is summarised where ``Loss`` is), written to ``summary.json``."""
    named = [(m.name, m) for _, m in config.metrics]
    named += set_metrics(config.metrics, config.valid_sets)
    summary = LearnerSummary.collect(
        store,
        {name for name, m in named if m.name in config.summary_metrics},
        last_round,
        model=describe_model(learner.model),
        stop_reason=stop_reason,
        units={name: m.attributes.unit for name, m in named if isinstance(m, Numeric)},
    )
    write_summary(config.directory, summary.dumps())
    return summary


def checkpoint_listing(checkpointer: RunCheckpointer | None) -> Listing:
    """The run's checkpointed model files by round, and its best round (ember's layout)."""
    if checkpointer is None:
        return {}, None
    try:
        return model_checkpoints(checkpointer.directory), best_epoch(checkpointer.directory)
    except CheckpointError as error:  # another layout, or nothing written
        log.debug("no checkpoint listing for the result: %s", error)
        return {}, None


def agreed_facts(
    run: StrategyRun,
    main: bool,
    checkpointer: RunCheckpointer | None,
    summary: LearnerSummary | None,
) -> tuple[Listing, LearnerSummary | None]:
    """The main process's checkpoints, best round (of ``checkpointer``, listed now, once its
    writes are done) and ``summary``, on every process of ``run`` (``main``: this is the main
    process, whose facts they are)."""
    facts: dict[str, Any] | None = None
    if main:
        checkpoints, best = checkpoint_listing(checkpointer)
        facts = {
            "checkpoints": {str(epoch): str(path) for epoch, path in checkpoints.items()},
            "best": best,
            "summary": None if summary is None else summary.to_json(),
        }
    agreed = run.decide(facts)
    assert agreed is not None
    checkpoints = {int(epoch): Path(path) for epoch, path in agreed["checkpoints"].items()}
    shared = agreed["summary"]
    return (checkpoints, agreed["best"]), (
        None if shared is None else LearnerSummary.from_json(shared)
    )


def complete_rounds(last_round: int, worker: AsyncProcessorTraining | None) -> int:
    """The rounds the run completed: the loop's count (``last_round``), less the round whose
    split the metrics thread failed in (it may process behind the loop, which trains on until
    it next waits for it: a non-finite loss at epoch 1 of two leaves 0 complete)."""
    if worker is not None and worker.error is not None:
        failed = worker.processor.split_epoch
        if failed is not None:
            return min(last_round, failed - 1)
    return last_round


def run_result(
    config: TrainingConfig,
    learner: Learner[M],
    renderer: MetricsRenderer,
    error: BaseException | None,
    summary: LearnerSummary | None,
    stop_reason: str | None,
    last_epoch: int,
    listing: Listing,
    store: EventStore,
) -> LearningResult[M]:
    """The ``LearningResult`` of ``config``'s run, trained now or finished before: its outcome,
    and what every result of a run reads back (directory, checkpoints, best epoch, logs)."""
    checkpoints, best = listing
    return LearningResult(
        learner.model,
        renderer,
        error,
        summary,
        stop_reason,
        last_epoch,
        directory=config.directory if config.keeps_files else None,
        best_epoch=best,
        checkpoints=checkpoints,
        strategy=config.strategy,
        reader=store if store.readers else None,
        metric_names=metric_names(config.metrics, config.valid_sets),
        inference_step=learner.inference_step,
    )
