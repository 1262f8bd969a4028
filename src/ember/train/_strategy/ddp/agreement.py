"""Rank 0 alone reports, every rank agrees: the loop's events and early stopping under DDP.

``run_epochs`` runs on every rank, but only rank 0 has the real event processor and the logs.
:class:`MainEvents` (rank 0) and :class:`WorkerEvents` (ranks > 0) stand in for the processor,
and :class:`AgreedEarlyStopping` for the early-stopping strategy, so that each decision they
take (the metrics thread failed, stop early) is rank 0's and reaches every rank: the ranks leave
the loop together instead of one of them waiting in a collective until the timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember._errors import DistributedError
from ember.distributed._messages import broadcast_bytes
from ember.distributed._processes import collective
from ember.train._metric.store import MetricQuery
from ember.train._processor import EventProcessor
from ember.train._strategy.ddp.ranks import Ranks

if TYPE_CHECKING:
    from ember.train._early_stopping import EarlyStoppingStrategy

__all__ = ["AgreedEarlyStopping", "MainEvents", "WorkerEvents"]


class MainEvents:
    """Rank 0's events go to the real processor; a flush tells every rank if it failed."""

    def __init__(self, processor: EventProcessor, ranks: Ranks) -> None:
        self._processor = processor
        self._ranks = ranks
        self.process_train = processor.process_train
        self.process_valid = processor.process_valid

    @property
    def error(self) -> BaseException | None:
        return getattr(self._processor, "error", None)

    def flush(self) -> None:
        self._processor.flush()
        self._ranks.broadcast_flag(self.error is not None, "agreeing on the metrics thread")


class WorkerEvents:
    """The events of ranks > 0 go nowhere; a flush learns whether rank 0's metrics failed."""

    def __init__(self, ranks: Ranks) -> None:
        self._ranks = ranks
        self.error: BaseException | None = None

    def process_train(self, event: Any) -> None:
        """Dropped: rank 0 logs the global batches."""

    def process_valid(self, event: Any) -> None:
        """Dropped: rank 0 logs the global batches."""

    def flush(self) -> None:
        if self._ranks.broadcast_flag(False, "agreeing on the metrics thread"):
            self.error = DistributedError("the metrics thread of rank 0 failed (see rank 0)")


class AgreedEarlyStopping:
    """Rank 0 asks the strategy (only it has the logs); every rank gets its answer."""

    def __init__(self, strategy: EarlyStoppingStrategy, ranks: Ranks) -> None:
        self._strategy = strategy
        self._ranks = ranks
        self.reason: str | None = None

    def should_stop(self, epoch: int, query: MetricQuery) -> bool:
        message = None
        if self._ranks.is_main and self._strategy.should_stop(epoch, query):
            reason = getattr(self._strategy, "reason", None)
            message = (reason or f"early stopping after epoch {epoch}").encode("utf-8")
        with collective("agreeing on early stopping"):
            answer = broadcast_bytes(message, 0, group=self._ranks.cpu)
        self.reason = answer.decode("utf-8") or None
        return self.reason is not None
