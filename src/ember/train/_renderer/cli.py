"""A renderer for logs and pipes: a few readable lines per split or test, never one per batch.

A progress line says where the run is, the running value of the split's first numeric metric,
the speed and what is left::

    [epoch 1/3] train 96/200 items (48%) · Loss 7.012 · 640 items/s · ETA 0:00:01, run 0:00:04

The run's ETA counts the splits still to come at the speed each had last (validation joins
the estimate once it has run once). When ``max_steps`` bounds the run, training shows its
optimizer steps out of the run's, and the run's ETA is the steps left at the pace of the steps
taken since the run started (validations included)::

    [epoch 2/10] train step 120/1000 (12%) · 3840 items · Loss 1.234 · 1920 items/s
        · 16 steps/s · ETA run 0:00:55                                     (one line)

A split resumed from a mid-round checkpoint counts the items before it as done, not in its
speed.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ember.train._metric.base import MetricDefinition
from ember.train._renderer.base import MetricState
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._evaluation.summary import EvaluationSummary
    from ember.train._summary import LearnerSummary

__all__ = ["CliMetricsRenderer"]


class CliMetricsRenderer:
    """Prints start and split lines, progress at most every ``interval`` seconds, and the
    epoch value of every metric at each split end; then the summary. An evaluation gets Burn's
    lines (``Starting evaluation with 2 test(s).``, ``Starting test 'test' with 360 items.``),
    the same progress lines and each test's values at its end.

    ``stream`` and ``clock`` are injectable for tests.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval < 0:
            raise ValueError(f"interval must be >= 0, got {interval}")
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._total_epochs = 0
        self._epoch = 0
        self._split: Split | None = None
        self._split_total: int | None = 0
        self._split_done = 0
        self._last_print: float | None = None
        self._epoch_values: dict[str, str] = {}
        self._test: str | None = None
        self._started = 0.0  # when the split started (the clock's time)
        self._running: tuple[str, float, float] | None = None  # metric, weighted sum, weight
        self._pace: dict[Split, tuple[int, float]] = {}  # items of a pass, seconds per item
        self._split_base = 0  # items of the split done before it started (a resumed split)
        self._total_steps: int | None = None  # set when max_steps bounds the run
        self._step = 0
        self._steps_since: tuple[int, float] = (0, 0.0)  # steps and time when counting began

    @property
    def stream(self) -> TextIO:
        """Where lines go: the stream given, else the current ``sys.stdout``."""
        return self._stream if self._stream is not None else sys.stdout

    def _print(self, line: str, *, flush: bool = True) -> None:
        """Write ``line``; a line written without ``flush`` goes out with the next flushed one.

        A split's closing lines are not flushed on their own: the next split's opening line,
        or the end of training, follows at once and flushes them. A flush on a pipe or a file is
        a system call, and a small model can end hundreds of splits a second.
        """
        self.stream.write(line + "\n")
        if flush:
            self.stream.flush()

    def register_metric(self, definition: MetricDefinition) -> None:
        """Nothing to prepare."""

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Announce the run."""
        self._total_epochs = total_epochs
        self._epoch = starting_epoch
        resumed = f" (resuming at epoch {starting_epoch})" if starting_epoch > 1 else ""
        epochs = "1 epoch" if total_epochs == 1 else f"{total_epochs} epochs"
        self._print(f"Starting training for {epochs}.{resumed}")

    def start_steps(self, total_steps: int, starting_step: int) -> None:
        """Show training in optimizer steps out of ``total_steps`` (``StepProgressLogger``)."""
        self._total_steps, self._step = total_steps, starting_step
        self._steps_since = (starting_step, self._clock())
        if starting_step:
            self._print(f"Resuming at step {starting_step} of {total_steps}.")

    def update_step(self, step: int) -> None:
        """The optimizer steps taken so far."""
        self._step = step

    def start_split(self, split: Split, total_items: int | None) -> None:
        """Announce a pass."""
        self._begin(split, total_items)
        self._print(f"Starting split '{split.value}' with {_items(total_items)}.")

    def resume_split(self, items_done: int) -> None:
        """The split goes on after ``items_done`` items (``ResumedSplitLogger``)."""
        self._split_done = self._split_base = items_done
        self._print(f"Resuming after {items_done} items.")

    def _begin(self, split: Split, total_items: int | None) -> None:
        self._split = split
        self._split_total = total_items
        self._split_done = self._split_base = 0
        self._last_print = self._started = self._clock()
        self._epoch_values = {}
        self._running = None

    def update_split(self, items_processed: int) -> None:
        """Print progress if ``interval`` has passed since the last line."""
        self._split_done = items_processed
        now = self._clock()
        if self._last_print is None or now - self._last_print >= self._interval:
            self._last_print = now
            self._print_progress()

    def update_train(self, state: MetricState) -> None:
        """Remember the value for the split-end line."""
        self._remember(state)

    def update_valid(self, state: MetricState) -> None:
        """Remember the value for the split-end line."""
        self._remember(state)

    def _remember(self, state: MetricState) -> None:
        numeric = state.numeric
        if numeric is not None and not numeric.final:
            running, weight = self._running, numeric.weight or 1.0
            if running is None:
                self._running = (state.entry.name, numeric.value * weight, weight)
            elif running[0] == state.entry.name:
                self._running = (
                    running[0],
                    running[1] + numeric.value * weight,
                    running[2] + weight,
                )
        if state.numeric is not None and state.numeric.final:
            self._epoch_values[state.entry.name] = f"{state.numeric.value:.4g}"
        elif state.numeric is None and state.entry.is_available:
            self._epoch_values[state.entry.name] = state.entry.formatted

    def end_split(self) -> None:
        """Print the last progress line and the split's epoch values."""
        self._print_end(f"Split ended: {self._split.value if self._split else '?'}")

    def _print_end(self, line: str) -> None:
        self._print_progress(flush=False)
        values = " · ".join(f"{name} {value}" for name, value in self._epoch_values.items())
        self._print(f"{line}{'  ' + values if values else ''}", flush=False)

    def update_epoch(self, epoch: int) -> None:
        """Move on to the next epoch."""
        self._epoch = epoch + 1

    def end(self) -> None:
        """Announce the end."""
        self._print("Training ended.")

    def on_train_end(self, summary: LearnerSummary | None) -> None:
        """Print the summary, if any."""
        if summary is not None:
            self._print(str(summary))

    def on_error(self, error: BaseException) -> None:
        """Print the error with its traceback."""
        text = "".join(traceback.format_exception(error)).rstrip()
        self._print(f"Training failed: {type(error).__name__}: {error}\n{text}")

    def on_warning(self, message: str) -> None:
        """Print the warning on a line of its own."""
        self._print(f"Warning: {message}", flush=True)

    def close(self) -> None:
        """Flush what was written."""
        self.stream.flush()

    # evaluation ----------------------------------------------------------------------------

    def start_evaluation(self, total_tests: int) -> None:
        """Announce the evaluation."""
        self._print(f"Starting evaluation with {total_tests} test(s).")

    def start_test(self, name: str, total_items: int | None) -> None:
        """Announce a test."""
        self._test = name
        self._begin(Split.TEST, total_items)
        self._print(f"Starting test '{name}' with {_items(total_items)}.")

    def update_test(self, name: str, state: MetricState) -> None:
        """Remember the value for the test-end line."""
        self._remember(state)

    def end_test(self) -> None:
        """Print the last progress line and the test's values."""
        self._print_end("Test ended.")

    def end_evaluation(self) -> None:
        """Announce the end."""
        self._print("Evaluation ended.")

    def on_test_end(self, summary: EvaluationSummary | None) -> None:
        """Print the evaluation summary, if any."""
        if summary is not None:
            self._print(str(summary))

    def _print_progress(self, *, flush: bool = True) -> None:
        if self._split is Split.TEST:
            where = f"[test {self._test}]"
        else:
            split = self._split.value if self._split else "?"
            where = f"[epoch {self._epoch}/{self._total_epochs}] {split}"
        total = self._split_total
        if total is None:  # a stream, or a round of steps: counts without a total
            done = f"{self._split_done} items"
        else:
            percent = 100 * self._split_done // total if total else 100
            done = f"{self._split_done}/{total} items ({percent}%)"
        if self._total_steps is not None and self._split is Split.TRAIN:
            steps = self._total_steps
            percent = 100 * self._step // steps if steps else 100
            done = f"step {self._step}/{steps} ({percent}%) · {done}"
        parts = [f"{where} {done}"]
        if self._running is not None:
            name, weighted, weight = self._running
            parts.append(f"{name} {weighted / weight:.4g}" if weight else name)
        parts.extend(self._speed())
        self._print(" · ".join(parts), flush=flush)

    def _speed(self) -> list[str]:
        """``items/s`` and the ETAs of the split and of the run, once there is a speed."""
        now = self._clock()
        elapsed, done = now - self._started, self._split_done - self._split_base
        if self._total_steps is not None and self._split is not Split.TEST:
            return self._step_speed(now, elapsed, done)
        if elapsed <= 0 or done <= 0:
            return []
        rate = done / elapsed
        speed = [_rate(rate, "items")]
        total, split = self._split_total, self._split
        if total is None or split is None:
            return speed
        self._pace[split] = (total, elapsed / done)
        left = max(total - self._split_done, 0) / rate
        if split is Split.TEST:
            return [*speed, f"ETA {_duration(left)}"]
        seconds = {s: items * each for s, (items, each) in self._pace.items()}  # a pass of each
        rest = seconds.get(Split.VALID, 0.0) if split is Split.TRAIN else 0.0  # of this epoch
        per_epoch = seconds.get(Split.TRAIN, 0.0) + seconds.get(Split.VALID, 0.0)
        run = left + rest + per_epoch * max(self._total_epochs - self._epoch, 0)
        return [*speed, f"ETA {_duration(left)}, run {_duration(run)}"]

    def _step_speed(self, now: float, elapsed: float, done: int) -> list[str]:
        """A run bounded by steps: ``items/s`` of the split, ``steps/s`` and the run's ETA from
        the steps left at the pace of the steps taken since the run started."""
        speed = [_rate(done / elapsed, "items")] if elapsed > 0 and done > 0 else []
        first, since = self._steps_since
        taken, seconds = self._step - first, now - since
        if taken <= 0 or seconds <= 0 or self._total_steps is None:
            return speed
        pace = taken / seconds
        left = max(self._total_steps - self._step, 0) / pace
        return [*speed, _rate(pace, "steps"), f"ETA run {_duration(left)}"]


def _rate(rate: float, unit: str) -> str:
    """``640 items/s``; three significant digits below 10."""
    return f"{rate:.0f} {unit}/s" if rate >= 10 else f"{rate:.3g} {unit}/s"


def _duration(seconds: float) -> str:
    """``H:MM:SS``, to the nearest second."""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}"


def _items(total: int | None) -> str:
    """``"N items"``, or ``"a stream of items"`` for a pass of unknown length."""
    return "a stream of items" if total is None else f"{total} items"
