"""What the renderers that draw the run's state share: the TUI on a terminal, the live display in
a Jupyter notebook.

:class:`StateRenderer` implements the renderer protocol (training and evaluation) by updating a
:class:`~ember.train._renderer.tui.state.ScreenState` under a lock, never formatting text, and then
calling :meth:`StateRenderer._changed`, where a subclass draws or asks for a drawing. At the end
it gives the screen back (:meth:`StateRenderer._restore`) and prints how training ended and the
summary (:meth:`StateRenderer._print`), so that they stay visible.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ember.train._interrupter import Interrupter
from ember.train._metric.base import MetricDefinition
from ember.train._metric.values import MetricState
from ember.train._renderer.cli import failure_line
from ember.train._renderer.tui.state import ScreenState
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from pathlib import Path

    from ember.train._summary import EvaluationSummary, LearnerSummary

__all__ = ["StateRenderer"]


class StateRenderer:
    """The renderer protocol over a :class:`ScreenState`; subclasses draw it (see the module doc).

    The protocol methods run on ``train-worker`` (or on the training thread in a run on the
    CPU; ``on_error`` and ``close`` on the caller's thread).
    """

    def __init__(self, interrupter: Interrupter, clock: Callable[[], float] = time.monotonic):
        self._interrupter = interrupter
        self._clock = clock
        self._lock = threading.Lock()  # the state below, written on the metrics thread
        self._state = ScreenState()
        self._dirty = True
        self._summary: LearnerSummary | EvaluationSummary | None = None
        self._stop_checkpoints = False  # a stop inside an epoch writes a step checkpoint

    # what a subclass provides --------------------------------------------------------------

    def _open(self) -> None:
        """Start showing the run (at ``start`` and ``start_evaluation``)."""

    def _changed(self) -> None:
        """The state changed (``_dirty`` is set): draw now, or let the drawing thread know."""

    def _restore(self) -> None:
        """Stop drawing and give the screen back (the last frame stays where it can)."""

    def _print(self, text: str) -> None:
        """Print ``text`` where the person sees it after the screen is given back."""
        raise NotImplementedError

    def _update(self, change: Callable[[ScreenState], object]) -> None:
        with self._lock:
            change(self._state)
            self._dirty = True
        self._changed()

    # the renderer protocol (train-worker thread) ----------------------------------------------

    def register_metric(self, definition: MetricDefinition) -> None:
        """Give the metric a place in the Metrics pane, and a plot if it is numeric."""
        self._update(lambda state: state.register(definition))

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Start showing the run."""
        now = self._clock()
        self._update(lambda state: state.begin(total_epochs, starting_epoch, now))
        self._open()

    def on_run_directory(self, directory: Path) -> None:
        """Print the directory the run writes, before the run is shown (it stays visible)."""
        self._print(f"Run directory: {directory}")

    def stop_checkpoints(self, kept: bool) -> None:
        """Whether a stop inside an epoch writes a step checkpoint: what the stop's epilogue
        says of the partial epoch."""
        with self._lock:
            self._stop_checkpoints = kept

    def start_steps(self, total_steps: int, starting_step: int) -> None:
        """Show the run's progress and ETA in optimizer steps (an optional renderer member)."""
        now = self._clock()
        self._update(lambda state: state.start_steps(total_steps, starting_step, now))

    def update_step(self, step: int) -> None:
        """The optimizer steps taken so far."""
        self._update(lambda state: setattr(state, "step", step))

    def start_split(self, split: Split, total_items: int | None) -> None:
        """A pass over ``total_items`` items begins."""
        now = self._clock()
        self._update(lambda state: state.start_split(split, total_items, now))

    def resume_split(self, items_done: int) -> None:
        """The split goes on after ``items_done`` items (an optional renderer member)."""
        self._update(lambda state: state.resume_split(items_done))

    def update_split(self, items_processed: int) -> None:
        """Items processed so far in the current split."""
        self._update(lambda state: state.update_progress(items_processed))

    def update_train(self, state: MetricState) -> None:
        """Record a training value (its text is formatted only when drawn)."""
        self._update(lambda run: run.update(Split.TRAIN, state))

    def update_valid(self, state: MetricState) -> None:
        """Record a validation value (its text is formatted only when drawn)."""
        self._update(lambda run: run.update(Split.VALID, state))

    def end_split(self) -> None:
        """The current split ended."""
        self._update(lambda state: state.end_split())

    def update_epoch(self, epoch: int) -> None:
        """``epoch`` is complete."""
        self._update(lambda state: setattr(state, "epoch", epoch + 1))

    def end(self) -> None:
        """Training ended."""
        self._update(lambda state: setattr(state, "finished", True))

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Keep the summary: :meth:`close` prints it once the screen is given back."""
        self._summary = summary

    # evaluation (eval-worker thread) -------------------------------------------------------

    def start_evaluation(self, total_tests: int) -> None:
        """Start showing ``total_tests`` tests (Burn's ``Evaluation`` mode); the Status pane
        counts tests instead of epochs."""
        now = self._clock()
        self._update(lambda state: state.begin_evaluation(total_tests, now))
        self._open()

    def start_test(self, name: str, total_items: int | None) -> None:
        """A test over ``total_items`` items begins."""
        self.start_split(Split.TEST, total_items)

    def update_test(self, name: str, state: MetricState) -> None:
        """Record a test value."""
        self._update(lambda run: run.update(Split.TEST, state))

    def end_test(self) -> None:
        """The current test ended: the next one counts."""
        self._update(lambda state: state.end_test())

    def end_evaluation(self) -> None:
        """Every test ended."""
        self.end()

    def on_test_end(self, summary: EvaluationSummary | None) -> None:
        """Keep the summary: :meth:`close` prints it once the screen is given back."""
        self._summary = summary

    def on_error(self, error: BaseException) -> None:
        """Give the screen back and print the error on one line (as the CLI renderer does)."""
        self._restore()
        self._print(failure_line(error))

    def close(self) -> None:
        """Give the screen back, then print how training ended and the summary."""
        self._restore()
        with self._lock:
            started, self._state.started = self._state.started, False
            evaluating, self._state.evaluating = self._state.evaluating, False
            done, total = self._state.epoch - 1, self._state.total_epochs
            stopped = not evaluating and self._interrupter.should_stop()
            # a stop inside an epoch abandons it: show the last completed epoch's values
            values = self._state.epoch_values(done if stopped else None)
            partial = stopped and self._state.has_values_after(done)
        if started:
            self._print_ending(evaluating, stopped, partial, done, total)
            for split, pairs in values.items():
                shown = " · ".join(f"{name} {value:.4g}" for name, value in pairs)
                self._print(f"  {split.value:<5}  {shown}")
        summary, self._summary = self._summary, None
        if summary is not None:
            self._print(str(summary))

    def _partial_epoch(self, done: int) -> str:
        """What became of the epoch a stop cut short (after ``done`` complete ones)."""
        values = f"the values are epoch {done}'s" if done else "no epoch completed"
        if self._stop_checkpoints:
            return (
                f"  epoch {done + 1} was stopped partway and its progress kept in a step "
                f"checkpoint (checkpoint/step-N/): a resume continues from it; {values}"
            )
        return (
            f"  epoch {done + 1} was stopped partway and not kept (a resume trains it again); "
            f"{values}"
        )

    def _print_ending(
        self, evaluating: bool, stopped: bool, partial: bool, done: int, total: int
    ) -> None:
        if evaluating:
            self._print(f"Evaluation ended after {done} of {total} tests.")
        elif stopped:
            reason = self._interrupter.message or "interrupted"
            self._print(f"Training stopped after {done} of {total} epochs: {reason}")
            if partial:
                self._print(self._partial_epoch(done))
        else:
            self._print(f"Training ended after {done} of {total} epochs.")
