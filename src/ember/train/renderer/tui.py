"""A full-screen renderer for terminals (reference §4.7), drawn with rich on the alternate screen.

Panes: Controls, Metrics (each metric's text per split), Status (mode, epochs, items,
iteration, items/s, ETA), Plots (live braille plots of the numeric metrics) and Progress (the split
and the whole run, with an ETA). Keys: ``q`` opens the Quit popup (``s`` stops training
through the interrupter, ``c``/Esc cancels), ←/→ switch the plotted metric, ↑/↓ the plot kind.
Ctrl-C keeps working (cbreak mode, not raw): during ``launch`` the first one stops gracefully,
a second one aborts (B7). There is no "kill" key: it would only be another Ctrl-C.

Threads: the protocol methods run on ``train-worker`` (``on_error`` and ``close`` on the
caller's thread) and only update state under a lock, never formatting text. A thread named
``train-renderer`` reads keys and draws, at most ``max_refresh_per_second`` times a second;
metric entries are formatted only there.

The terminal is always given back: ``close()``, ``on_error()``, a failure while drawing and an
``atexit`` hook all leave the alternate screen, show the cursor and restore the terminal mode
(saved before cbreak mode was set). The summary and errors are printed after that, on the normal
screen, so they stay visible.
"""

from __future__ import annotations

import atexit
import logging
import math
import os
import select
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.layout import Layout
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ember.train.metric.base import MetricDefinition, MetricEntry
from ember.train.metric.state import format_value
from ember.train.metric.store import Split
from ember.train.renderer.base import MetricState
from ember.train.renderer.plot_data import BrailleCanvas, MetricPlot, PlotKind, Point, data_range

if sys.platform != "win32":
    import termios

if TYPE_CHECKING:
    from ember.train.interrupter import Interrupter
    from ember.train.summary import LearnerSummary

__all__ = ["STOP_REASON", "TuiMetricsRenderer", "decode_keys", "format_eta"]

log = logging.getLogger("ember.train")

STOP_REASON = "Stopping training from user input."
"""The interrupter's reason when the person confirms the Quit popup with ``s``."""

_IDLE_REDRAW = 1.0  # seconds: redraw without news so that items/s and the ETA move on
_SPLIT_STYLE = {Split.TRAIN: "bright_red", Split.VALID: "bright_blue"}
_SPLIT_LABEL = {Split.TRAIN: "Train", Split.VALID: "Valid"}


# Keys ------------------------------------------------------------------------------------------

_SEQUENCES = {
    b"\x1b[A": "up",
    b"\x1b[B": "down",
    b"\x1b[C": "right",
    b"\x1b[D": "left",
    b"\x1bOA": "up",
    b"\x1bOB": "down",
    b"\x1bOC": "right",
    b"\x1bOD": "left",
}


def decode_keys(data: bytes) -> tuple[list[str], bytes]:
    """The keys in ``data`` and the unfinished escape sequence at its end (to prepend to the
    next read). Arrows are named ``up``/``down``/``left``/``right``, a lone Esc ``escape``,
    other characters are themselves (lower case); other escape sequences are skipped.
    """
    keys: list[str] = []
    i = 0
    while i < len(data):
        if data[i] != 0x1B:
            keys.append(chr(data[i]).lower())
            i += 1
            continue
        if data[i : i + 3] in _SEQUENCES:
            keys.append(_SEQUENCES[data[i : i + 3]])
            i += 3
        elif i + 1 == len(data):
            return keys, data[i:]  # Esc alone, or the start of a sequence: wait for more
        elif data[i + 1 : i + 2] in (b"[", b"O"):
            end = i + 2
            while end < len(data) and not 0x40 <= data[end] <= 0x7E:
                end += 1
            if end >= len(data):
                return keys, data[i:]
            i = end + 1  # a key we do not use (F-keys, Home, ...)
        else:
            keys.append("escape")
            i += 1
    return keys, b""


class _KeyReader:
    """Reads key presses from a file descriptor; a terminal is put in cbreak mode (keys arrive
    at once, unechoed; Ctrl-C still interrupts) until :meth:`restore`."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self._pending = b""
        self._saved: list[Any] | None = None

    @property
    def active(self) -> bool:
        """False without input, or once it reached its end or failed."""
        return self.fd is not None

    def enter(self) -> None:
        """Save the terminal mode and switch to cbreak mode (terminals only)."""
        if sys.platform == "win32" or self.fd is None or not os.isatty(self.fd):
            return
        saved = termios.tcgetattr(self.fd)
        mode = termios.tcgetattr(self.fd)
        mode[3] &= ~(termios.ECHO | termios.ICANON)
        mode[6][termios.VMIN] = 1
        mode[6][termios.VTIME] = 0
        self._saved = saved
        termios.tcsetattr(self.fd, termios.TCSANOW, mode)

    def restore(self) -> None:
        """Put the terminal mode back as it was (idempotent)."""
        saved, self._saved = self._saved, None
        if sys.platform != "win32" and saved is not None and self.fd is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)

    def read(self, timeout: float) -> list[str]:
        """The keys pressed, waiting up to ``timeout`` seconds for the first."""
        if self.fd is None:
            return []
        try:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            data = os.read(self.fd, 1024) if ready else None
        except (OSError, ValueError):  # closed or hung up: the screen goes on without keys
            data = b""
        if data is None:
            pending, self._pending = self._pending, b""
            return ["escape"] if pending == b"\x1b" else []
        if not data:
            self.fd = None  # end of input: no more keys
            return []
        keys, self._pending = decode_keys(self._pending + data)
        return keys


def _input_fd(stream: TextIO | int | None) -> int | None:
    """The descriptor keys are read from: ``stream``'s, or stdin's if it is a terminal (piped
    data is not a person typing)."""
    if isinstance(stream, int):
        return stream
    try:
        if stream is not None:
            return stream.fileno()
        fd = sys.stdin.fileno() if sys.stdin is not None else None
        return fd if fd is not None and os.isatty(fd) else None
    except (AttributeError, OSError, ValueError):  # closed, or replaced by one without a file
        return None


# State -----------------------------------------------------------------------------------------


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
class _Frame:
    """Everything one screen shows, copied out of the state under the lock."""

    mode: str
    stopping: str | None
    epoch: int
    total_epochs: int
    split: Split | None
    split_done: int
    split_total: int
    iteration: int
    items_per_second: float | None
    run_fraction: float
    eta: str
    metrics: tuple[tuple[str, tuple[tuple[Split, MetricEntry], ...]], ...]
    plot_names: tuple[str, ...]
    selected: int
    kind: PlotKind
    points: dict[Split, list[Point]]
    popup: bool


class _RunState:
    """What the TUI shows; written on the metrics thread under the renderer's lock."""

    def __init__(self) -> None:
        self.entries: dict[str, dict[Split, MetricEntry]] = {}
        self.plots: dict[str, MetricPlot] = {}
        self.started = False
        self.finished = False
        self.total_epochs = 0
        self.starting_epoch = 1
        self.epoch = 1
        self.split: Split | None = None
        self.split_open = False
        self.split_total = 0
        self.split_done = 0
        self.split_started = 0.0
        self.iteration = 0
        self.run_started = 0.0
        self.items_before = 0
        self.split_totals: dict[Split, int] = {}

    def register(self, definition: MetricDefinition) -> None:
        self.entries.setdefault(definition.name, {})
        if definition.is_numeric and definition.name not in self.plots:
            self.plots[definition.name] = MetricPlot(definition.name)

    def begin(self, total_epochs: int, starting_epoch: int, now: float) -> None:
        self.started, self.finished = True, False
        self.total_epochs, self.starting_epoch, self.epoch = (
            total_epochs,
            starting_epoch,
            starting_epoch,
        )
        self.split, self.split_open = None, False
        self.run_started, self.items_before, self.split_totals = now, 0, {}

    def start_split(self, split: Split, total: int, now: float) -> None:
        self.split, self.split_open = split, True
        self.split_total, self.split_done, self.split_started, self.iteration = total, 0, now, 0
        self.split_totals[split] = total

    def end_split(self) -> None:
        if self.split_open:
            self.items_before += self.split_done
            self.split_open = False

    def update(self, split: Split, state: MetricState) -> None:
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
    ) -> _Frame:
        names = tuple(self.plots)
        selected = selected % len(names) if names else 0
        elapsed = now - self.split_started
        ips = self.split_done / elapsed if self.split_done and elapsed > 0 else None
        per_epoch = sum(self.split_totals.values())
        total = per_epoch * max(1, self.total_epochs - self.starting_epoch + 1)
        done = self.items_before + (self.split_done if self.split_open else 0)
        run_elapsed = now - self.run_started
        warm = (done >= 10 and run_elapsed > 10) or run_elapsed > 30  # Burn's ETA warm-up
        eta = (total - done) * run_elapsed / done if warm and done and total > done else None
        if self.finished:
            mode = "Finished"
        elif self.split is None:
            mode = "Starting"
        else:
            mode = "Training" if self.split is Split.TRAIN else "Validating"
        return _Frame(
            mode=mode,
            stopping=stopping,
            epoch=min(self.epoch, self.total_epochs) if self.total_epochs else self.epoch,
            total_epochs=self.total_epochs,
            split=self.split,
            split_done=self.split_done,
            split_total=self.split_total,
            iteration=self.iteration,
            items_per_second=ips,
            run_fraction=min(1.0, done / total) if total else 0.0,
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

    def epoch_values(self) -> dict[Split, list[tuple[str, float]]]:
        """The last epoch value of each numeric metric, per split."""
        values: dict[Split, list[tuple[str, float]]] = {}
        for name, plot in self.plots.items():
            for split, epochs in plot.epochs.items():
                if epochs:
                    values.setdefault(split, []).append((name, epochs[-1][1]))
        return values


# Drawing ---------------------------------------------------------------------------------------


def _number(value: float) -> str:
    return format_value(value, 2, None)


class _PlotPane:
    """Tabs of the numeric metrics, the plot kind, and a braille chart of the selected one."""

    def __init__(self, frame: _Frame) -> None:
        self.frame = frame

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        frame, width = self.frame, options.max_width
        height = options.height if options.height is not None else 16
        if not frame.plot_names:
            yield Text("No numeric metric to plot.", style="dim", justify="center")
            return
        tabs = Text(no_wrap=True, overflow="ellipsis")
        for index, name in enumerate(frame.plot_names):
            tabs.append(" │ " if index else " ")
            tabs.append(name, style="bold reverse" if index == frame.selected else "")
        yield tabs
        title = f"{frame.plot_names[frame.selected]} · {frame.kind.value}"
        yield Text(title, style="bold", justify="center", no_wrap=True)
        yield from self._chart(width, max(1, height - 4))

    def _chart(self, width: int, rows: int) -> Iterable[Text]:
        points = self.frame.points
        x_range = data_range(x for series in points.values() for x, _ in series)
        y_range = data_range(y for series in points.values() for _, y in series)
        if x_range is None or y_range is None:
            yield Text("\n" * (rows // 2) + "No data yet.", style="dim", justify="center")
            return
        labels = {0: _number(y_range[1]), rows - 1: _number(y_range[0])}
        if rows > 4:
            labels[(rows - 1) // 2] = _number((y_range[0] + y_range[1]) / 2)
        label_width = max(len(label) for label in labels.values())
        canvas = BrailleCanvas(width - label_width - 2, rows, x_range, y_range)
        splits = list(points)
        for owner, split in enumerate(splits):
            canvas.plot(points[split], owner)
        for number, row in enumerate(canvas.rows()):
            line = Text(no_wrap=True)
            line.append(f"{labels.get(number, ''):>{label_width}} │", style="dim")
            for cell_owner, cells in groupby(row, key=itemgetter(1)):  # one span per run
                style = _SPLIT_STYLE[splits[cell_owner]] if cell_owner is not None else None
                line.append("".join(char for char, _ in cells), style)
            yield line
        yield Text(" " * label_width + " └" + "─" * canvas.width, style="dim", no_wrap=True)
        xs = [x for series in points.values() for x, _ in series]
        unit = "epoch " if self.frame.kind is PlotKind.SUMMARY else ""
        axis = Text(f"{' ' * (label_width + 2)}{unit}{min(xs):g}", no_wrap=True)
        right = Text(f"{unit}{max(xs):g}  ")
        for split in splits:
            right.append(" ━ ", style=_SPLIT_STYLE[split])
            right.append(_SPLIT_LABEL[split])
        axis.append(" " * max(1, width - axis.cell_len - right.cell_len))
        yield axis + right


class _Overlay:
    """``base`` with ``popup`` (``width`` x ``height`` cells) drawn over its centre."""

    def __init__(self, base: RenderableType, popup: RenderableType, width: int, height: int):
        self.base, self.popup, self.width, self.height = base, popup, width, height

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        height = options.height if options.height is not None else console.height
        lines = console.render_lines(self.base, options.update(width=width, height=height))
        popup_width, popup_height = min(self.width, width), min(self.height, height)
        popup = console.render_lines(
            self.popup, options.update(width=popup_width, height=popup_height)
        )
        top, left = (height - popup_height) // 2, (width - popup_width) // 2
        for offset, popup_line in enumerate(popup):
            before, _, after = Segment.divide(
                lines[top + offset], [left, left + popup_width, width]
            )
            lines[top + offset] = [*before, *popup_line, *after]
        new_line = Segment.line()
        for line in lines:
            yield from line
            yield new_line


def _controls_pane() -> Panel:
    text = Text(no_wrap=True, overflow="ellipsis")
    for name, keys, what in (
        ("Quit", "q", "Stop the training."),
        ("Metric", "← →", "Switch metrics."),
        ("Plot", "↑ ↓", "Switch plot types."),
    ):
        text.append(f"{name} : ", style="bold")
        text.append(keys, style="bold cyan")
        text.append(f"  {what}\n")
    text.rstrip()
    return Panel(text, title="Controls", title_align="left")


def _metrics_pane(frame: _Frame) -> Panel:
    lines: list[Text] = []
    for name, per_split in frame.metrics:
        lines.append(Text(f" {name} ", style="bold yellow", no_wrap=True))
        for split, entry in per_split:
            line = Text(f"   {_SPLIT_LABEL[split]} ", style=_SPLIT_STYLE[split], no_wrap=True)
            line.append(entry.formatted, style="default")  # formatted here, at draw time only
            lines.append(line)
    body: RenderableType = Group(*lines) if lines else Text("No metric yet.", style="dim")
    return Panel(body, title="Metrics", title_align="left")


def _status_pane(frame: _Frame) -> Panel:
    ips = f"{frame.items_per_second:.1f}" if frame.items_per_second is not None else "---"
    rows = [
        ("Mode", frame.mode),
        ("Epochs", f"{frame.epoch}/{frame.total_epochs}"),
        ("Items", f"{frame.split_done}/{frame.split_total}"),
        ("Iteration", str(frame.iteration)),
        ("Items/s", ips),
        ("ETA", frame.eta),
    ]
    text = Text(no_wrap=True, overflow="ellipsis")
    for name, value in rows:
        text.append(f"{name} : ", style="bold")
        text.append(f"{value}\n")
    text.rstrip()
    return Panel(text, title="Status", title_align="left")


def _progress_pane(frame: _Frame) -> Panel:
    grid = Table.grid(expand=True, padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_column(no_wrap=True)
    split_style = _SPLIT_STYLE.get(frame.split, "white") if frame.split else "white"
    percent = 100 * frame.split_done // frame.split_total if frame.split_total else 0
    grid.add_row(
        Text(f"{frame.split.value if frame.split else 'split':<5}", style=split_style),
        ProgressBar(
            total=max(1, frame.split_total),
            completed=frame.split_done,
            complete_style=split_style,
            finished_style=split_style,
        ),
        f"{frame.split_done}/{frame.split_total} items {percent:>3}%",
    )
    grid.add_row(
        Text("total", style="yellow"),
        ProgressBar(
            total=1.0,
            completed=frame.run_fraction,
            complete_style="yellow",
            finished_style="yellow",
        ),
        f"epoch {frame.epoch}/{frame.total_epochs} {int(100 * frame.run_fraction):>3}% "
        f"(ETA {frame.eta})",
    )
    body: RenderableType = grid
    if frame.stopping is not None:
        body = Group(grid, Text(f"Stopping : {frame.stopping}", style="bold red", no_wrap=True))
    return Panel(body, title="Progress", title_align="left")


def _quit_popup() -> Panel:
    text = Text("\n", no_wrap=True)
    for key, what in (
        ("s", "Stop the training."),
        ("c", "Cancel."),
    ):
        text.append(f"  [{key}] ", style="bold cyan")
        text.append(f"{what}\n")
    return Panel(text, title="Quit", border_style="bold red")


def render_frame(frame: _Frame) -> RenderableType:
    """The whole screen for ``frame``: the layout of reference §4.7."""
    layout = Layout()
    layout.split_column(
        Layout(name="top", ratio=1, minimum_size=16),
        Layout(_progress_pane(frame), name="progress", size=4 if frame.stopping is None else 5),
    )
    layout["top"].split_row(
        Layout(name="left", ratio=38, minimum_size=34),
        Layout(Panel(_PlotPane(frame), title="Plots", title_align="left"), ratio=62),
    )
    layout["left"].split_column(
        Layout(_controls_pane(), size=5),
        Layout(_metrics_pane(frame), ratio=1, minimum_size=6),
        Layout(_status_pane(frame), size=8),
    )
    if frame.popup:
        return _Overlay(layout, _quit_popup(), 44, 6)
    return layout


# The renderer ----------------------------------------------------------------------------------


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
        self._console = console if console is not None else Console()
        self._input = input_stream
        self._clock = clock
        self._interval = 1.0 / max_refresh_per_second
        self._threaded = threaded
        self._lock = threading.Lock()  # the state below, written on the metrics thread
        self._state = _RunState()
        self._dirty = True
        self._popup = False
        self._kind = PlotKind.FULL
        self._selected = 0
        self._summary: LearnerSummary | None = None
        self._draw_lock = threading.RLock()  # the terminal: drawing, entering, leaving
        self._live: Live | None = None
        self._reader: _KeyReader | None = None
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

    def start_split(self, split: Split, total_items: int) -> None:
        """A pass over ``total_items`` items begins."""
        with self._lock:
            self._state.start_split(split, total_items, self._clock())
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
            values = self._state.epoch_values()
            done, total = self._state.epoch - 1, self._state.total_epochs
        if started:
            if self._interrupter.should_stop():
                reason = self._interrupter.message or "interrupted"
                self._print(f"Training stopped after {done} of {total} epochs: {reason}")
            else:
                self._print(f"Training ended after {done} of {total} epochs.")
            for split, pairs in values.items():
                shown = " · ".join(f"{name} {value:.4g}" for name, value in pairs)
                self._print(f"  {split.value:<5}  {shown}")
        summary, self._summary = self._summary, None
        if summary is not None:
            self._print(str(summary))

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
            self._live = Live(
                console=self._console,
                screen=True,
                auto_refresh=False,  # we draw, rate-limited, on train-renderer
                redirect_stdout=False,  # leave sys.stdout alone: other threads print too
                redirect_stderr=False,
            )
            self._reader = _KeyReader(_input_fd(self._input))
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
