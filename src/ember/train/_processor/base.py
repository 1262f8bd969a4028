"""What receives the training loop's events: the :class:`EventProcessor` protocol, and the
processor of a process that shows nothing."""

from __future__ import annotations

from typing import Protocol

from ember.train._events import EvaluatorEvent, LearnerEvent

__all__ = ["Event", "EventProcessor", "SilentProcessor"]

Event = LearnerEvent | EvaluatorEvent
"""What the processors carry: a training run's events or an evaluation's."""


class EventProcessor(Protocol):
    """Receives the training loop's events."""

    def process_train(self, event: LearnerEvent) -> None:
        """An event of the training split (and the run-level events)."""
        ...

    def process_valid(self, event: LearnerEvent) -> None:
        """An event of the validation split."""
        ...

    def flush(self) -> None:
        """Return once every event given so far has been processed."""
        ...

    @property
    def error(self) -> BaseException | None:
        """The first error met while processing events (it ends the run), or None."""
        ...


class SilentProcessor:
    """Drops every event: the processor of a process that neither logs nor renders (DDP ranks
    other than 0, whose outputs rank 0 logs)."""

    error: BaseException | None = None

    def process_train(self, event: LearnerEvent) -> None:
        """Dropped."""

    def process_valid(self, event: LearnerEvent) -> None:
        """Dropped."""

    def flush(self) -> None:
        """Nothing is pending."""
