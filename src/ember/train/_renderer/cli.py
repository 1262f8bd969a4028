"""A renderer for logs and pipes: a few readable lines per split or test, never one per batch.

A progress line says where the run is, the running value of the split's first numeric metric,
the speed, the time since the run started and what is left, each time named::

    [epoch 1/3] train 96/200 items (48%) · Loss 7.012 · 640 items/s · elapsed 0:00:04
        · ETA split 0:00:01 · ETA run 0:00:09                              (one line)

The speed is the split's so far, shown once it was measured over half a second (a 360-item
validation done in a millisecond would read 481436 items/s: no speed is shown for it). The
split's ETA is its items left at that speed (before then, at its earlier passes' pace); the
run's adds the splits still to come at the pace of their earlier passes, smoothed over the
passes (an exponential average), so it counts down steadily instead of following each
split's first batches (validation joins it once it has run once). When ``max_steps`` bounds
the run, training shows its optimizer steps out of the run's, and the run's ETA is the steps
left at the pace of the steps taken since the run started (validations included)::

    [epoch 2/10] train step 120/1000 (12%) · 3840 items · Loss 1.234 · 1920 items/s
        · 16 steps/s · elapsed 0:01:02 · ETA run 0:00:55                   (one line)

A split resumed from a mid-round checkpoint counts the items before it as done, not in its
speed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ember.train._metric.base import MetricDefinition
from ember.train._metric.values import MetricState
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from pathlib import Path

    from ember.train._summary import EvaluationSummary, LearnerSummary

__all__ = ["CliMetricsRenderer", "failure_line"]

_MIN_RATE_SECONDS = 0.5
"""A speed measured over less time than this is not shown (nor used for an ETA)."""
_SMOOTHING = 0.3
"""The weight of a split's newest pass in the pace of its passes (an exponential average)."""


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
        self._labels: dict[str, str] = {}  # by name: the name with its unit (Accuracy (%))
        self._test: str | None = None
        self._started = 0.0  # when the split started (the clock's time)
        self._run_started = 0.0  # when the run (or the evaluation) started
        self._running: tuple[str, float, float] | None = None  # metric, weighted sum, weight
        self._pace: dict[Split, tuple[int, float]] = {}  # items of a pass, seconds per item
        self._split_base = 0  # items of the split done before it started (a resumed split)
        self._total_steps: int | None = None  # set when max_steps bounds the run
        self._announced = True  # the run's first line: printed (start() defers it)
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
        a system call, and a small model can end hundreds of splits a second. The run's first
        line goes before any other (see :meth:`start`).
        """
        self._announce()
        self.stream.write(line + "\n")
        if flush:
            self.stream.flush()

    def register_metric(self, definition: MetricDefinition) -> None:
        """Name the metric as the summary tables do: with its unit (``Accuracy (%)``)."""
        self._labels[definition.name] = definition.label

    def start(self, total_epochs: int, starting_epoch: int) -> None:
        """Begin the run: its line (``Starting training for 3 epochs.``) is printed before the
        next one, once :meth:`start_steps`, which follows when steps bound the run, has said
        whether to speak of steps and rounds."""
        self._total_epochs = total_epochs
        self._epoch = starting_epoch
        self._run_started = self._clock()
        self._total_steps, self._step, self._announced = None, 0, False

    def start_steps(self, total_steps: int, starting_step: int) -> None:
        """Show training in optimizer steps out of ``total_steps`` (an optional renderer member)."""
        self._total_steps, self._step = total_steps, starting_step
        self._steps_since = (starting_step, self._clock())

    def _announce(self) -> None:
        """Write the run's line if :meth:`start` left it to write."""
        if not self._announced:
            self._announced = True
            self.stream.write(self._start_line() + "\n")

    def _start_line(self) -> str:
        """``Starting training for 3 epochs.``, or, bounded by steps, ``... for 400 steps in 8
        rounds.`` (a round: what validation follows), each saying where a resumed run starts."""
        total, epoch, steps = self._total_epochs, self._epoch, self._total_steps
        if steps is None:
            resumed = f" (resuming at epoch {epoch})" if epoch > 1 else ""
            return f"Starting training for {_count(total, 'epoch')}.{resumed}"
        step = self._step
        resumed = f" (resuming at step {step}, in round {epoch})" if step or epoch > 1 else ""
        return (
            f"Starting training for {_count(steps, 'step')} in {_count(total, 'round')}.{resumed}"
        )

    def update_step(self, step: int) -> None:
        """The optimizer steps taken so far."""
        self._step = step

    def start_split(self, split: Split, total_items: int | None) -> None:
        """Announce a pass (training in a run bounded by steps: the step it starts at)."""
        self._begin(split, total_items)
        if total_items is None and split is Split.TRAIN and self._total_steps is not None:
            where = f"at step {self._step} of {self._total_steps}"  # a round of steps
        else:
            where = f"with {_items(total_items)}"
        self._print(f"Starting split '{split.value}' {where}.")

    def resume_split(self, items_done: int) -> None:
        """The split goes on after ``items_done`` items (an optional renderer member)."""
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
        numeric, name = state.numeric, state.entry.name
        label = self._labels.get(name, name)
        if numeric is not None and not numeric.final:
            running, weight = self._running, numeric.weight or 1.0
            if running is None:
                self._running = (label, numeric.value * weight, weight)
            elif running[0] == label:
                self._running = (
                    running[0],
                    running[1] + numeric.value * weight,
                    running[2] + weight,
                )
        if numeric is not None and numeric.final:
            self._epoch_values[label] = f"{numeric.value:.4g}"
        elif numeric is None and state.entry.is_available:
            self._epoch_values[label] = state.entry.formatted

    def end_split(self) -> None:
        """Print the last progress line and the split's epoch values."""
        self._learn_pace()
        self._print_end(f"Split ended: {self._split.value if self._split else '?'}")

    def _learn_pace(self) -> None:
        """Fold the pass that ends into its split's pace (seconds per item, smoothed)."""
        split, total = self._split, self._split_total
        done, seconds = self._split_done - self._split_base, self._clock() - self._started
        if split is None or total is None or done <= 0 or seconds <= 0:
            return
        each = seconds / done
        earlier = self._pace.get(split)
        smoothed = each if earlier is None else earlier[1] + _SMOOTHING * (each - earlier[1])
        self._pace[split] = (total, smoothed)

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
        """Print the error on one line (see :func:`failure_line`)."""
        self._print(failure_line(error))

    def on_warning(self, message: str) -> None:
        """Print the warning on a line of its own."""
        self._print(f"Warning: {message}", flush=True)

    def on_run_directory(self, directory: Path) -> None:
        """Print the directory the run writes (an optional renderer member)."""
        self._print(f"Run directory: {directory}")

    def close(self) -> None:
        """Flush what was written (the run's line too, if nothing followed it)."""
        self._announce()
        self.stream.flush()

    # evaluation ----------------------------------------------------------------------------

    def start_evaluation(self, total_tests: int) -> None:
        """Announce the evaluation."""
        self._run_started = self._clock()
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
        self._learn_pace()
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
            round_ = "epoch" if self._total_steps is None else "round"
            where = f"[{round_} {self._epoch}/{self._total_epochs}] {split}"
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
        """``items/s`` once meaningful, the time since the run started and the ETAs of the
        split and of the run (see the module doc)."""
        now = self._clock()
        elapsed, done = now - self._started, self._split_done - self._split_base
        measured = elapsed >= _MIN_RATE_SECONDS and done > 0
        speed = [_rate(done / elapsed, "items")] if measured else []
        since = f"elapsed {_duration(now - self._run_started)}"
        if self._total_steps is not None and self._split is not Split.TEST:
            return [*speed, *self._step_speed(now), since, *self._step_eta(now)]
        each = elapsed / done if measured else None
        return [*speed, since, *self._etas(each)]

    def _etas(self, each: float | None) -> list[str]:
        """The split's ETA at ``each`` seconds per item (None: its earlier passes' pace), and
        the run's with the passes still to come (see the module doc)."""
        total, split = self._split_total, self._split
        if total is None or split is None:
            return []
        if each is None and split in self._pace:
            each = self._pace[split][1]
        if each is None:
            return []
        left = max(total - self._split_done, 0) * each
        if split is Split.TEST:
            return [f"ETA test {_duration(left)}"]
        passes = {s: items * pace for s, (items, pace) in self._pace.items()}  # a pass of each
        train = passes.get(Split.TRAIN, total * each if split is Split.TRAIN else 0.0)
        valid = passes.get(Split.VALID, 0.0)
        rest = valid if split is Split.TRAIN else 0.0  # of this epoch
        run = left + rest + (train + valid) * max(self._total_epochs - self._epoch, 0)
        return [f"ETA split {_duration(left)}", f"ETA run {_duration(run)}"]

    def _step_speed(self, now: float) -> list[str]:
        """A run bounded by steps: ``steps/s`` since the run started, once meaningful."""
        pace = self._step_pace(now)
        return [] if pace is None else [_rate(pace, "steps")]

    def _step_eta(self, now: float) -> list[str]:
        """A run bounded by steps: its ETA, the steps left at the pace since it started."""
        pace = self._step_pace(now)
        if pace is None or self._total_steps is None:
            return []
        return [f"ETA run {_duration(max(self._total_steps - self._step, 0) / pace)}"]

    def _step_pace(self, now: float) -> float | None:
        first, since = self._steps_since
        taken, seconds = self._step - first, now - since
        return taken / seconds if taken > 0 and seconds >= _MIN_RATE_SECONDS else None


def failure_line(error: BaseException) -> str:
    """A failed training on one line: the error and its notes (PEP 678: the run adds where
    its traceback is, ``experiment.log``). No traceback: ``launch`` then raises
    ``TrainingError`` from the error, whose traceback Python prints below (once), and
    ``errors_in_result()`` keeps it on ``result.traceback``."""
    notes = getattr(error, "__notes__", None) or []  # PEP 678: absent without a note
    said = f" ({'; '.join(str(note) for note in notes)})" if notes else ""
    return f"Training failed: {type(error).__name__}: {error}{said}"


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


def _count(number: int, unit: str) -> str:
    """``1 epoch``, ``3 epochs``."""
    return f"{number} {unit}{'' if number == 1 else 's'}"
