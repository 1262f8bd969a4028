"""``LearningResult``: how a training run ended (what ``SupervisedTraining.launch`` returns)."""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from typing import Generic, TypeVar

from torch import nn

from ember.train._renderer.base import MetricsRenderer
from ember.train._summary import LearnerSummary

__all__ = ["LearningResult"]

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True, slots=True)
class LearningResult(Generic[M]):
    """How a run ended.

    ``model`` is the trained model in eval mode (call ``.train()`` to go on training);
    ``error`` is the exception that ended training, with its ``__traceback__``, or None;
    ``stop_reason`` says why training ended before ``num_epochs`` (early stopping, an
    interrupt), or is None; ``summary`` is set when the builder asked for one.
    """

    model: M
    renderer: MetricsRenderer
    error: BaseException | None = None
    summary: LearnerSummary | None = None
    stop_reason: str | None = None
    last_epoch: int = 0

    @property
    def succeeded(self) -> bool:
        """True when training ended without an error."""
        return self.error is None

    @property
    def traceback(self) -> str | None:
        """The error's formatted traceback, or None."""
        if self.error is None:
            return None
        return "".join(traceback.format_exception(self.error))
