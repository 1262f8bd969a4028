"""The renderer protocols: what the metrics thread tells whoever shows training to a person.

A renderer is two roles, as in Burn: it shows metric values (:class:`MetricsRendererTraining`)
and training progress (:class:`TrainingProgressLogger`). :class:`MetricsRenderer` is both plus
the hooks for registration and errors. Every method is called on the ``train-worker`` thread, in
event order; a plain class with these methods is a renderer (``examples/custom_renderer.py``).

An evaluation (``EvaluatorBuilder``) needs an :class:`EvaluationRenderer`: a renderer that also
shows tests (:class:`MetricsRendererEvaluation`), called on the ``eval-worker`` thread. Progress
within a test comes through ``update_split`` as within a split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ember._frozen import set_field
from ember.train._metric.base import MetricDefinition, MetricEntry, NumericEntry
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._evaluation.summary import EvaluationSummary
    from ember.train._summary import LearnerSummary

__all__ = [
    "EvaluationRenderer",
    "MetricState",
    "MetricsRenderer",
    "MetricsRendererEvaluation",
    "MetricsRendererTraining",
    "ResumedSplitLogger",
    "StepProgressLogger",
    "StopCheckpointLogger",
    "TrainingProgressLogger",
    "WarningRenderer",
]


@dataclass(frozen=True, slots=True, init=False)
class MetricState:
    """A metric's entry for the renderer; ``numeric`` is set for numeric metrics."""

    entry: MetricEntry
    numeric: NumericEntry | None = None

    def __init__(self, entry: MetricEntry, numeric: NumericEntry | None = None) -> None:
        set_field(self, "entry", entry)  # written out: one per batch (ember/_frozen.py)
        set_field(self, "numeric", numeric)


@runtime_checkable
class MetricsRendererTraining(Protocol):
    """Shows metric values."""

    def update_train(self, state: MetricState) -> None:
        """A training metric has a new value."""
        ...

    def update_valid(self, state: MetricState) -> None:
        """A validation metric has a new value."""
        ...

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Training ended; show the summary if there is one."""
        ...


@runtime_checkable
class StepProgressLogger(Protocol):
    """Optional: a renderer that shows progress in optimizer steps. When ``max_steps`` bounds
    the run, the metrics thread calls ``start_steps`` right after ``start``, then
    ``update_step`` with each training batch's step count (before ``update_split``)."""

    def start_steps(self, total_steps: int, starting_step: int) -> None:
        """The run will take ``total_steps`` optimizer steps; ``starting_step`` were taken
        before it started (a resume)."""
        ...

    def update_step(self, step: int) -> None:
        """The optimizer steps taken so far."""
        ...


@runtime_checkable
class ResumedSplitLogger(Protocol):
    """Optional: a renderer told where a split resumed from a mid-round checkpoint starts."""

    def resume_split(self, items_done: int) -> None:
        """The split just started goes on after ``items_done`` items of its pass (called right
        after ``start_split``): they count as done, not towards this run's speed."""
        ...


@runtime_checkable
class StopCheckpointLogger(Protocol):
    """Optional: a renderer told whether a stop inside an epoch leaves a step checkpoint.

    Called right after ``start`` (and ``start_steps``), so that what the renderer says after a
    stop is true: with step checkpoints, a stop inside an epoch trains to the end of the
    optimizer step, writes ``checkpoint/step-N/`` and a resume continues from it; without (no
    checkpointers, a train metric that cannot save its state), the partial epoch is dropped and
    a resume trains it again.
    """

    def stop_checkpoints(self, kept: bool) -> None:
        """``kept``: a stop inside an epoch writes a step checkpoint a resume continues from."""
        ...


@runtime_checkable
class TrainingProgressLogger(Protocol):
    """Shows where training is."""

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Training starts at ``starting_epoch`` of ``total_epochs``."""
        ...

    def start_split(self, split: Split, total_items: int | None) -> None:
        """A pass over ``total_items`` items begins (None: unknown, a streaming loader)."""
        ...

    def update_split(self, items_processed: int) -> None:
        """Items processed so far in the current split."""
        ...

    def end_split(self) -> None:
        """The current split ended."""
        ...

    def update_epoch(self, epoch: int) -> None:
        """``epoch`` is complete."""
        ...

    def end(self) -> None:
        """Training ended."""
        ...


@runtime_checkable
class WarningRenderer(Protocol):
    """A renderer that shows ember's warnings (a damaged checkpoint skipped, a metric not
    found) to the person watching, besides ``experiment.log``; optional for a renderer."""

    def on_warning(self, message: str) -> None:
        """Show ``message``; called on whichever thread logged it."""
        ...


@runtime_checkable
class MetricsRenderer(MetricsRendererTraining, TrainingProgressLogger, Protocol):
    """A complete renderer."""

    def register_metric(self, definition: MetricDefinition) -> None:
        """A metric was registered (called before :meth:`start`)."""
        ...

    def on_error(self, error: BaseException) -> None:
        """Training failed with ``error``; show it to the person watching."""
        ...

    def close(self) -> None:
        """Release the terminal or stream; called once, also after an error."""
        ...


@runtime_checkable
class MetricsRendererEvaluation(Protocol):
    """Shows an evaluation: its tests, their metric values and the summary."""

    def start_evaluation(self, total_tests: int) -> None:
        """An evaluation of ``total_tests`` tests begins."""
        ...

    def start_test(self, name: str, total_items: int | None) -> None:
        """The test ``name`` begins over ``total_items`` items."""
        ...

    def update_test(self, name: str, state: MetricState) -> None:
        """A metric of the test ``name`` has a new value."""
        ...

    def end_test(self) -> None:
        """The current test ended."""
        ...

    def end_evaluation(self) -> None:
        """Every test ended."""
        ...

    def on_test_end(self, summary: EvaluationSummary | None) -> None:
        """The evaluation ended; show the summary if there is one."""
        ...


@runtime_checkable
class EvaluationRenderer(MetricsRenderer, MetricsRendererEvaluation, Protocol):
    """A renderer that shows training and evaluation (``CliMetricsRenderer`` is one)."""
