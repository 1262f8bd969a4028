"""What the TUI shows: the screen's state, written by the protocol methods, and snapshots of it.

:class:`ScreenState` is mutated on ``train-worker`` under the renderer's lock;
:meth:`ScreenState.frame` copies out a :class:`Frame` (computing items/s and the ETA) so that
drawing, on ``train-renderer``, happens outside the lock. Nothing here imports rich.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ember.train._metric.base import MetricDefinition, MetricEntry
from ember.train._metric.values import MetricState
from ember.train._renderer.plot_data import MetricPlot, PlotKind, Point
from ember.train._vocabulary import Split

__all__ = ["Frame", "ScreenState", "format_eta"]


def format_eta(seconds: float | None) -> str:
    """An ETA as Burn shows it: ``N secs``, ``N mins``, ``N hours``, ``N days`` or ``---``."""
    if seconds is None or not math.isfinite(seconds):
        return "---"
    whole = max(0, round(seconds))
    for unit, size in (("days", 86400), ("hours", 3600), ("mins", 60)):
        if whole >= size:
            return f"{whole // size} {unit}"
    return f"{whole} secs"


@dataclass(frozen=True, slots=True)
class Frame:
    """Everything one screen shows, copied out of the state under the lock."""

    mode: str
    evaluating: bool
    """An evaluation: ``epoch``/``total_epochs`` count tests."""
    stopping: str | None
    epoch: int
    total_epochs: int
    split: Split | None
    split_done: int
    split_total: int | None
    iteration: int
    step: int
    """The optimizer steps taken (shown when ``total_steps`` is set)."""
    total_steps: int | None
    """The run's optimizer steps when ``max_steps`` bounds it: progress and ETA are in steps."""
    items_per_second: float | None
    run_fraction: float
    eta: str
    metrics: tuple[tuple[str, tuple[tuple[Split, MetricEntry], ...]], ...]
    plot_names: tuple[str, ...]
    selected: int
    kind: PlotKind
    points: dict[Split, list[Point]]
    popup: bool


class ScreenState:
    """What the TUI shows; written on the metrics thread under the renderer's lock."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[Split, MetricEntry]] = {}
        self.plots: dict[str, MetricPlot] = {}
        self.started = False
        self.finished = False
        self.evaluating = False
        self.total_epochs = 0
        self.starting_epoch = 1
        self.epoch = 1
        self.split: Split | None = None
        self.split_open = False
        self.split_total: int | None = 0
        self.split_done = 0
        self.split_started = 0.0
        self.iteration = 0
        self.run_started = 0.0
        self.items_before = 0
        self.split_totals: dict[Split, int | None] = {}
        self.split_base = 0  # items of the split done before it started (a resumed split)
        self.total_steps: int | None = None
        self.step = 0
        self.steps_since: tuple[int, float] = (0, 0.0)  # steps and time when counting began

    def register(self, definition: MetricDefinition) -> None:
        """Give ``definition`` a row in the Metrics pane, and a plot if it is numeric."""
        self.entries.setdefault(definition.name, {})
        if definition.is_numeric and definition.name not in self.plots:
            self.plots[definition.name] = MetricPlot(definition.name)

    def begin(self, total_epochs: int, starting_epoch: int, now: float) -> None:
        """A run starts (or starts again): reset the progress, keep the metrics."""
        self.started, self.finished = True, False
        self.total_epochs, self.starting_epoch, self.epoch = (
            total_epochs,
            starting_epoch,
            starting_epoch,
        )
        self.split, self.split_open = None, False
        self.run_started, self.items_before, self.split_totals = now, 0, {}
        self.total_steps = None

    def begin_evaluation(self, total_tests: int, now: float) -> None:
        """An evaluation of ``total_tests`` tests starts: ``epoch`` counts tests."""
        self.begin(total_tests, 1, now)
        self.evaluating = True

    def start_steps(self, total_steps: int, starting_step: int, now: float) -> None:
        """The run is bounded by ``total_steps`` optimizer steps; ``starting_step`` are taken."""
        self.total_steps, self.step, self.steps_since = (
            total_steps,
            starting_step,
            (
                starting_step,
                now,
            ),
        )

    def start_split(self, split: Split, total: int | None, now: float) -> None:
        """A pass over ``total`` items of ``split`` (None: unknown) begins at ``now``."""
        self.split, self.split_open = split, True
        self.split_total, self.split_done, self.split_started, self.iteration = total, 0, now, 0
        self.split_base = 0
        self.split_totals[split] = total

    def resume_split(self, items_done: int) -> None:
        """The split just started goes on after ``items_done`` items of its pass."""
        self.split_done = self.split_base = items_done

    def update_progress(self, items_processed: int) -> None:
        """A batch was processed: ``items_processed`` items of the split so far."""
        self.split_done = items_processed
        self.iteration += 1

    def end_split(self) -> None:
        """The current split ended: its items count towards the run's progress."""
        if self.split_open:
            self.items_before += self.split_done - self.split_base
            self.split_open = False

    def end_test(self) -> None:
        """The current test ended: the next one counts."""
        self.end_split()
        self.epoch += 1

    def update(self, split: Split, state: MetricState) -> None:
        """Keep the latest entry of a metric and add its numeric value to its plot."""
        name = state.entry.name
        per_split = self.entries.get(name)
        if per_split is None:
            per_split = self.entries[name] = {}
        per_split[split] = state.entry
        numeric = state.numeric
        if numeric is not None:
            plot = self.plots.get(name)
            if plot is None:
                plot = self.plots[name] = MetricPlot(name)
            if numeric.final:
                plot.add_epoch(split, self.epoch, numeric.value)
            else:
                plot.add(split, numeric.value)

    def frame(
        self, now: float, kind: PlotKind, selected: int, popup: bool, stopping: str | None
    ) -> Frame:
        """A snapshot for drawing at ``now``, with the person's plot choice and popup."""
        names = tuple(self.plots)
        selected = selected % len(names) if names else 0
        elapsed, fresh = now - self.split_started, self.split_done - self.split_base
        ips = fresh / elapsed if fresh > 0 and elapsed > 0 else None
        if self.total_steps is not None:  # max_steps bounds the run: progress in steps
            first, since = self.steps_since
            total, done, run_elapsed = self.total_steps, self.step - first, now - since
            left = self.total_steps - self.step
        else:
            totals = self.split_totals.values()
            # A stream's unknown total leaves the run's total unknown: no run fraction, no ETA.
            per_epoch = 0 if None in totals else sum(total or 0 for total in totals)
            total = per_epoch * max(1, self.total_epochs - self.starting_epoch + 1)
            done = self.items_before + (self.split_done - self.split_base if self.split_open else 0)
            run_elapsed = now - self.run_started
            left = total - done
        warm = (done >= 10 and run_elapsed > 10) or run_elapsed > 30  # Burn's ETA warm-up
        eta = left * run_elapsed / done if warm and done > 0 and left > 0 else None
        fraction = (
            (self.step / total if self.total_steps is not None else done / total) if total else 0.0
        )
        if self.finished:
            mode = "Finished"
        elif self.split is None:
            mode = "Starting"
        elif self.split is Split.TEST:
            mode = "Evaluation"
        else:
            mode = "Training" if self.split is Split.TRAIN else "Validating"
        return Frame(
            mode=mode,
            evaluating=self.evaluating,
            stopping=stopping,
            epoch=min(self.epoch, self.total_epochs) if self.total_epochs else self.epoch,
            total_epochs=self.total_epochs,
            split=self.split,
            split_done=self.split_done,
            split_total=self.split_total,
            iteration=self.iteration,
            step=self.step,
            total_steps=self.total_steps,
            items_per_second=ips,
            run_fraction=min(1.0, fraction),
            eta=format_eta(0.0 if self.finished else eta),
            metrics=tuple(
                (name, tuple(per_split.items())) for name, per_split in self.entries.items()
            ),
            plot_names=names,
            selected=selected,
            kind=kind,
            points=self.plots[names[selected]].points(kind) if names else {},
            popup=popup,
        )

    def epoch_values(self, last: int | None = None) -> dict[Split, list[tuple[str, float]]]:
        """The latest epoch value of each numeric metric, per split; with ``last``, of the
        epochs up to ``last`` only (a stopped run's partial epoch left out)."""
        values: dict[Split, list[tuple[str, float]]] = {}
        for name, plot in self.plots.items():
            for split, epochs in plot.epochs.items():
                kept = [value for epoch, value in epochs if last is None or epoch <= last]
                if kept:
                    values.setdefault(split, []).append((name, kept[-1]))
        return values

    def has_values_after(self, epoch: int) -> bool:
        """Whether a split logged values of an epoch after ``epoch`` (one stopped partway)."""
        return any(
            epochs and epochs[-1][0] > epoch
            for plot in self.plots.values()
            for epochs in plot.epochs.values()
        )
