"""A full-screen renderer for terminals (Burn's layout), drawn with rich on the alternate screen.

Panes: Controls, Metrics (each metric's text per split), Status (mode, epochs, items,
iteration, items/s, ETA), Plots (live braille plots of the numeric metrics) and Progress (the split
and the whole run, with an ETA). Keys: ``q`` opens the Quit popup (``s`` stops training
through the interrupter, ``c``/Esc cancels), ←/→ switch the plotted metric, ↑/↓ the plot kind.
Ctrl-C keeps working (cbreak mode, not raw): during ``launch`` the first one stops gracefully,
a second one aborts ("graceful stop"). There is no "kill" key: it would only be another Ctrl-C.

An evaluation (``EvaluatorBuilder(...).renderer(tui)``) is Burn's ``Evaluation`` mode: the
Status pane shows ``Mode : Evaluation`` and counts tests, the test values are drawn in green
(``Test``); an evaluation cannot be stopped from the keyboard except by Ctrl-C.

Threads: the protocol methods run on ``train-worker``, or on the training thread in a run on
the CPU (``on_error`` and ``close`` on the caller's thread), and only update state under a
lock, never formatting text. A thread named
``train-renderer`` reads keys and draws, at most ``max_refresh_per_second`` times a second;
metric entries are formatted only there.

The terminal is always given back: ``close()``, ``on_error()``, a failure while drawing and an
``atexit`` hook all leave the alternate screen, show the cursor and restore the terminal mode
(saved before cbreak mode was set). The summary and errors are printed after that, on the normal
screen, so they stay visible.

This module holds the renderer itself: the protocol methods, the lock, the ``train-renderer``
thread and the terminal. What is shown is in :mod:`~ember.train._renderer.tui.state`, how it is
drawn in :mod:`~ember.train._renderer.tui.panes`, how keys are read in
:mod:`~ember.train._renderer.tui.keys`.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ember.train._metric.base import MetricDefinition
from ember.train._renderer.base import MetricState
from ember.train._renderer.plot_data import PlotKind
from ember.train._renderer.tui.keys import KeyReader, decode_keys, input_fd
from ember.train._renderer.tui.state import RunState, format_eta
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from ember.train._evaluation.summary import EvaluationSummary
    from ember.train._interrupter import Interrupter
    from ember.train._summary import LearnerSummary

__all__ = ["STOP_REASON", "TuiMetricsRenderer", "decode_keys", "format_eta"]

log = logging.getLogger("ember.train")

STOP_REASON = "Stopping training from user input."
"""The interrupter's reason when the person confirms the Quit popup with ``s``."""

_IDLE_REDRAW = 1.0  # seconds: redraw without news so that items/s and the ETA move on


class TuiMetricsRenderer:
    """The full-screen renderer; stops training through ``interrupter`` when asked to.

    ``console`` (default: a rich console on stdout), ``input_stream`` (where keys are read: a
    file object or descriptor; default stdin, if it is a terminal) and ``clock`` are injectable
    for tests. With
    ``threaded=False`` no ``train-renderer`` thread is started: call :meth:`poll` to read keys
    and draw (tests, or an application that runs its own loop).
    """

    def __init__(
        self,
        interrupter: Interrupter,
        *,
        console: Console | None = None,
        input_stream: TextIO | int | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_refresh_per_second: float = 10,
        threaded: bool = True,
    ) -> None:
        if not max_refresh_per_second > 0:
            raise ValueError(f"max_refresh_per_second must be > 0, got {max_refresh_per_second}")
        self._interrupter = interrupter
        if console is None:
            # imported here, as below: rich's layout machinery is not needed by `import ember`
            from rich.console import Console

            console = Console()
        self._console = console
        self._input = input_stream
        self._clock = clock
        self._interval = 1.0 / max_refresh_per_second
        self._threaded = threaded
        self._lock = threading.Lock()  # the state below, written on the metrics thread
        self._state = RunState()
        self._dirty = True
        self._popup = False
        self._kind = PlotKind.FULL
        self._selected = 0
        self._summary: LearnerSummary | EvaluationSummary | None = None
        self._stop_checkpoints = False  # a stop inside an epoch writes a step checkpoint
        self._draw_lock = threading.RLock()  # the terminal: drawing, entering, leaving
        self._live: Live | None = None
        self._reader: KeyReader | None = None
        self._thread: threading.Thread | None = None
        self._stop_thread = threading.Event()
        self._last_draw = -math.inf

    # the renderer protocol (train-worker thread) ----------------------------------------------

    def register_metric(self, definition: MetricDefinition) -> None:
        """Give the metric a place in the Metrics pane, and a plot if it is numeric."""
        with self._lock:
            self._state.register(definition)
            self._dirty = True

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Take over the terminal and start drawing."""
        with self._lock:
            self._state.begin(total_epochs, starting_epoch, self._clock())
            self._dirty = True
        self._open()

    def stop_checkpoints(self, kept: bool) -> None:
        """Whether a stop inside an epoch writes a step checkpoint (``StopCheckpointLogger``):
        what the stop's epilogue says of the partial epoch."""
        with self._lock:
            self._stop_checkpoints = kept

    def start_steps(self, total_steps: int, starting_step: int) -> None:
        """Show the run's progress and ETA in optimizer steps (``StepProgressLogger``)."""
        with self._lock:
            self._state.start_steps(total_steps, starting_step, self._clock())
            self._dirty = True

    def update_step(self, step: int) -> None:
        """The optimizer steps taken so far."""
        with self._lock:
            self._state.step = step
            self._dirty = True

    def start_split(self, split: Split, total_items: int | None) -> None:
        """A pass over ``total_items`` items begins."""
        with self._lock:
            self._state.start_split(split, total_items, self._clock())
            self._dirty = True

    def resume_split(self, items_done: int) -> None:
        """The split goes on after ``items_done`` items (``ResumedSplitLogger``)."""
        with self._lock:
            self._state.resume_split(items_done)
            self._dirty = True

    def update_split(self, items_processed: int) -> None:
        """Items processed so far in the current split."""
        with self._lock:
            self._state.split_done = items_processed
            self._state.iteration += 1
            self._dirty = True

    def update_train(self, state: MetricState) -> None:
        """Record a training value (its text is formatted only when drawn)."""
        with self._lock:
            self._state.update(Split.TRAIN, state)
            self._dirty = True

    def update_valid(self, state: MetricState) -> None:
        """Record a validation value (its text is formatted only when drawn)."""
        with self._lock:
            self._state.update(Split.VALID, state)
            self._dirty = True

    def end_split(self) -> None:
        """The current split ended."""
        with self._lock:
            self._state.end_split()
            self._dirty = True

    def update_epoch(self, epoch: int) -> None:
        """``epoch`` is complete."""
        with self._lock:
            self._state.epoch = epoch + 1
            self._dirty = True

    def end(self) -> None:
        """Training ended."""
        with self._lock:
            self._state.finished = True
            self._dirty = True

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Keep the summary: :meth:`close` prints it once the terminal is back."""
        self._summary = summary

    # evaluation (eval-worker thread) -------------------------------------------------------

    def start_evaluation(self, total_tests: int) -> None:
        """Take over the terminal for ``total_tests`` tests (Burn's ``Evaluation`` mode); the
        Status pane counts tests instead of epochs."""
        with self._lock:
            self._state.begin(total_tests, 1, self._clock())
            self._state.evaluating = True
            self._dirty = True
        self._open()

    def start_test(self, name: str, total_items: int | None) -> None:
        """A test over ``total_items`` items begins."""
        self.start_split(Split.TEST, total_items)

    def update_test(self, name: str, state: MetricState) -> None:
        """Record a test value."""
        with self._lock:
            self._state.update(Split.TEST, state)
            self._dirty = True

    def end_test(self) -> None:
        """The current test ended: the next one counts."""
        with self._lock:
            self._state.end_split()
            self._state.epoch += 1
            self._dirty = True

    def end_evaluation(self) -> None:
        """Every test ended."""
        self.end()

    def on_test_end(self, summary: EvaluationSummary | None) -> None:
        """Keep the summary: :meth:`close` prints it once the terminal is back."""
        self._summary = summary

    def on_error(self, error: BaseException) -> None:
        """Give the terminal back and print the error with its traceback."""
        self._restore()
        text = "".join(traceback.format_exception(error)).rstrip()
        self._print(f"Training failed: {type(error).__name__}: {error}\n{text}")

    def close(self) -> None:
        """Give the terminal back, then print how training ended and the summary."""
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
            if evaluating:
                self._print(f"Evaluation ended after {done} of {total} tests.")
            elif stopped:
                reason = self._interrupter.message or "interrupted"
                self._print(f"Training stopped after {done} of {total} epochs: {reason}")
                if partial:
                    self._print(self._partial_epoch(done))
            else:
                self._print(f"Training ended after {done} of {total} epochs.")
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

    # keys and drawing ------------------------------------------------------------------------

    def handle_key(self, key: str) -> None:
        """React to a key named as :func:`decode_keys` names it."""
        stop = False
        with self._lock:
            if self._popup:
                if key not in ("s", "c", "escape"):
                    return
                self._popup = False
                stop = key == "s"
            elif key == "q":
                self._popup = True
            elif key in ("left", "right"):
                count = len(self._state.plots)
                step = 1 if key == "right" else -1
                self._selected = (self._selected + step) % count if count else 0
            elif key in ("up", "down"):
                self._kind = self._kind.previous() if key == "up" else self._kind.next()
            else:
                return
            self._dirty = True
        if stop:  # the run ends as for any interrupt: after the step, checkpoints as usual
            self._interrupter.stop(STOP_REASON)

    def refresh(self) -> bool:
        """Draw if something changed and the rate limit allows; True if a frame was drawn."""
        with self._draw_lock:
            live = self._live
            if live is None:
                return False
            now = self._clock()
            since = now - self._last_draw + 1e-9  # a frame due now is not skipped for rounding
            if since < self._interval or (not self._dirty and since < _IDLE_REDRAW):
                return False
            stopping = self._interrupter.message if self._interrupter.should_stop() else None
            with self._lock:
                frame = self._state.frame(now, self._kind, self._selected, self._popup, stopping)
                self._dirty = False
            self._last_draw = now
            from ember.train._renderer.tui.panes import render_frame

            live.update(render_frame(frame), refresh=True)  # rendered outside the state lock
            return True

    def poll(self) -> None:
        """Handle the keys pressed so far and draw if due (without waiting)."""
        try:
            self._tick(0.0)
        except Exception as error:
            self._fail(error)

    def _tick(self, timeout: float) -> None:
        reader = self._reader
        if reader is not None and reader.active:
            keys = reader.read(timeout)
        else:
            keys = []
            if timeout:
                self._stop_thread.wait(timeout)
        for key in keys:
            self.handle_key(key)
        self.refresh()

    def _run(self) -> None:
        try:
            while not self._stop_thread.is_set():
                self._tick(self._interval)
        except Exception as error:
            self._fail(error)

    def _fail(self, error: Exception) -> None:
        log.error("the terminal UI failed", exc_info=error)
        self._restore()
        text = "".join(traceback.format_exception(error)).rstrip()
        self._print(f"The terminal UI failed and was closed; training goes on.\n{text}")

    # the terminal ----------------------------------------------------------------------------

    def _open(self) -> None:
        with self._draw_lock:
            if self._live is not None:
                return
            self._stop_thread.clear()
            self._last_draw = -math.inf
            from rich.live import Live

            self._live = Live(
                console=self._console,
                screen=True,
                auto_refresh=False,  # we draw, rate-limited, on train-renderer
                redirect_stdout=False,  # leave sys.stdout alone: other threads print too
                redirect_stderr=False,
            )
            self._reader = KeyReader(input_fd(self._input))
            atexit.register(self._restore)  # also if close() is never reached
            try:
                self._live.start()
                self._reader.enter()
            except BaseException:
                self._restore()
                raise
            if self._threaded:
                self._thread = threading.Thread(
                    target=self._run, name="train-renderer", daemon=True
                )
                self._thread.start()

    def _restore(self) -> None:
        """Stop drawing, leave the alternate screen, show the cursor, restore the terminal mode."""
        self._stop_thread.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._draw_lock:
            self._thread = None
            live, reader = self._live, self._reader
            self._live = self._reader = None
            atexit.unregister(self._restore)
            try:
                if live is not None:
                    live.stop()
            finally:
                if reader is not None:
                    reader.restore()

    def _print(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
