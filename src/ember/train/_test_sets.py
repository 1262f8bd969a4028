"""The test sets ``with_test`` gives, evaluated after training: each scored with copies of the
valid metrics from the weights of the checkpoint ``with_test`` names (the best round by
default), through the run's ``LearningResult.evaluate`` (``_evaluation/``). Only a run that
trained without an error is tested; a failure of the tests is the result's error (the renderer
has shown it)."""

from __future__ import annotations

import copy
import dataclasses
from typing import TypeVar

from torch import nn

from ember.train._config import TrainingConfig
from ember.train._renderer.base import EvaluationRenderer
from ember.train._result import LearningResult
from ember.train._vocabulary import Split

__all__ = ["tested"]

M = TypeVar("M", bound=nn.Module)


def tested(config: TrainingConfig, result: LearningResult[M]) -> LearningResult[M]:
    """``result`` with the evaluation of ``config``'s tests (``LearningResult.evaluation``), or
    with the error that stopped them (``LearningResult.error``)."""
    renderer = config.renderer if isinstance(config.renderer, EvaluationRenderer) else None
    metrics = [copy.deepcopy(metric) for split, metric in config.metrics if split is Split.VALID]
    try:
        evaluation = result.evaluate(
            config.tests,
            *metrics,
            checkpoint=config.test_checkpoint,
            renderer=renderer,
            summary=config.summary,
            precision=config.precision,
        )
    except Exception as error:  # reported in the result (the renderer has shown it)
        return dataclasses.replace(result, error=error)
    return dataclasses.replace(result, evaluation=evaluation)
