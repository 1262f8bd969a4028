"""The renderer: what the metrics thread tells whoever shows training to a person.

:class:`MetricsRenderer` is everything a renderer is told, on the ``train-worker`` thread and in
event order: the metric values (``update_train``, ``update_valid``, ``on_train_end``, Burn's
``MetricsRendererTraining``), the progress (``start``, ``start_split``, ``update_split``,
``end_split``, ``update_epoch``, ``end``, Burn's progress logger), the metrics' registration and
the errors. Its optional members (progress in optimizer steps, a split resumed mid-pass,
whether a stop keeps a step checkpoint, ember's warnings, the run directory) have defaults that
show nothing. A
plain class with the required methods is a renderer (``examples/custom_renderer.py``); or
subclass :class:`Renderer`, whose every method does nothing, and override what you show (Keras'
``Callback`` pattern).

An evaluation (``EvaluatorBuilder``) needs an :class:`EvaluationRenderer`: a renderer that also
shows tests, called on the ``eval-worker`` thread. Progress within a test comes through
``update_split`` as within a split.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ember.train._metric.base import MetricDefinition
from ember.train._metric.values import MetricState
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from pathlib import Path

    from ember.train._summary import EvaluationSummary, LearnerSummary

__all__ = ["EvaluationRenderer", "MetricsRenderer", "Renderer"]


@runtime_checkable
class MetricsRenderer(Protocol):
    """Shows training to a person (see the module doc). Optional members a renderer may add
    (their defaults, :class:`Renderer`'s, show nothing): ``start_steps``, ``update_step``,
    ``resume_split``, ``stop_checkpoints``, ``on_warning``, ``on_run_directory``."""

    def register_metric(self, definition: MetricDefinition) -> None:
        """A metric was registered (called before :meth:`start`)."""
        ...

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Training starts at ``starting_epoch`` of ``total_epochs``."""
        ...

    def start_split(self, split: Split, total_items: int | None) -> None:
        """A pass over ``total_items`` items begins (None: unknown, a streaming loader)."""
        ...

    def update_split(self, items_processed: int) -> None:
        """Items processed so far in the current split."""
        ...

    def update_train(self, state: MetricState) -> None:
        """A training metric has a new value."""
        ...

    def update_valid(self, state: MetricState) -> None:
        """A validation metric has a new value."""
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

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Training ended; show the summary if there is one."""
        ...

    def on_error(self, error: BaseException) -> None:
        """Training failed with ``error``; show it to the person watching."""
        ...

    def close(self) -> None:
        """Release the terminal or stream; called once, also after an error."""
        ...


@runtime_checkable
class EvaluationRenderer(MetricsRenderer, Protocol):
    """A renderer that also shows an evaluation: its tests, their values and the summary
    (``CliMetricsRenderer`` is one)."""

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


class Renderer:
    """A renderer that shows nothing: subclass it and override what you show. It is an
    :class:`EvaluationRenderer`; its methods are also the defaults of a renderer's optional
    members (``start_steps``, ``update_step``, ``resume_split``, ``stop_checkpoints``,
    ``on_warning``, ``on_run_directory``), which a plain class may leave out."""

    def register_metric(self, definition: MetricDefinition) -> None:
        """A metric was registered."""

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Training starts."""

    def start_split(self, split: Split, total_items: int | None) -> None:
        """A pass begins."""

    def update_split(self, items_processed: int) -> None:
        """Items processed so far in the split."""

    def update_train(self, state: MetricState) -> None:
        """A training metric has a new value."""

    def update_valid(self, state: MetricState) -> None:
        """A validation metric has a new value."""

    def end_split(self) -> None:
        """The split ended."""

    def update_epoch(self, epoch: int) -> None:
        """``epoch`` is complete."""

    def end(self) -> None:
        """Training ended."""

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Training ended, with its summary or None."""

    def on_error(self, error: BaseException) -> None:
        """Training failed with ``error``."""

    def close(self) -> None:
        """Nothing to release."""

    def start_steps(self, total_steps: int, starting_step: int) -> None:
        """Optional: the run will take ``total_steps`` optimizer steps (``max_steps`` bounds it),
        of which ``starting_step`` were taken before it started (a resume); called right after
        ``start``, then ``update_step`` with each training batch's step count (before
        ``update_split``). Default: progress stays in items."""

    def update_step(self, step: int) -> None:
        """Optional: the optimizer steps taken so far (when ``start_steps`` was called)."""

    def resume_split(self, items_done: int) -> None:
        """Optional: the split just started goes on after ``items_done`` items of its pass (a
        resume from a mid-round checkpoint, called right after ``start_split``): they count as
        done, not towards this run's speed."""

    def stop_checkpoints(self, kept: bool) -> None:
        """Optional: whether a stop inside an epoch writes a step checkpoint a resume continues
        from (``kept``), or abandons the epoch; called right after ``start``, so that what the
        renderer says after a stop is true."""

    def on_warning(self, message: str) -> None:
        """Optional: show one of ember's warnings (a damaged checkpoint skipped, a metric not
        found) to the person watching, besides ``experiment.log``; called on whichever thread
        logged it."""

    def on_run_directory(self, directory: Path) -> None:
        """Optional: the directory the run writes (a ``versioned()`` run's ``version_N``, or
        the free sibling ``DIR-N`` of a directory that holds an earlier run); called once,
        before ``start``, on the thread that launched the run."""

    def start_evaluation(self, total_tests: int) -> None:
        """An evaluation begins."""

    def start_test(self, name: str, total_items: int | None) -> None:
        """A test begins."""

    def update_test(self, name: str, state: MetricState) -> None:
        """A test's metric has a new value."""

    def end_test(self) -> None:
        """The test ended."""

    def end_evaluation(self) -> None:
        """Every test ended."""

    def on_test_end(self, summary: EvaluationSummary | None) -> None:
        """The evaluation ended, with its summary or None."""
