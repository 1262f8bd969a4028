"""The TUI's screen: rich renderables for the panes, the plot and the Quit popup, from a frame.

Everything here is a pure function of a :class:`~ember.train._renderer.tui.state.Frame` (a
snapshot taken under the renderer's lock), so drawing never holds that lock and metric texts
are formatted only here, on ``train-renderer``. The plot's data and braille raster come from
:mod:`ember.train._renderer.plot_data`; this module only lays them out and colours them.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import groupby
from operator import itemgetter

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.layout import Layout
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.segment import Segment
from rich.table import Table
from rich.text import Text

from ember.train._metric.state import format_value
from ember.train._renderer.plot_data import BrailleCanvas, PlotKind, data_range
from ember.train._renderer.tui.state import Frame
from ember.train._vocabulary import Split

__all__ = ["frame_height", "render_frame"]

_SPLIT_STYLE = {Split.TRAIN: "bright_red", Split.VALID: "bright_blue", Split.TEST: "bright_green"}
_SPLIT_LABEL = {Split.TRAIN: "Train", Split.VALID: "Valid", Split.TEST: "Test"}


def _number(value: float) -> str:
    """A y-axis label: two decimals (exponent form for tiny values), no unit."""
    return format_value(value, 2, None)


class _PlotPane:
    """Tabs of the numeric metrics, the plot kind, and a braille chart of the selected one."""

    def __init__(self, frame: Frame) -> None:
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
    """The keys the screen reacts to."""
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


def _metrics_pane(frame: Frame) -> Panel:
    """Each metric's latest text, per split."""
    lines: list[Text] = []
    for name, per_split in frame.metrics:
        lines.append(Text(f" {name} ", style="bold yellow", no_wrap=True))
        for split, entry in per_split:
            line = Text(f"   {_SPLIT_LABEL[split]} ", style=_SPLIT_STYLE[split], no_wrap=True)
            line.append(entry.formatted, style="default")  # formatted here, at draw time only
            lines.append(line)
    body: RenderableType = Group(*lines) if lines else Text("No metric yet.", style="dim")
    return Panel(body, title="Metrics", title_align="left")


def _status_pane(frame: Frame) -> Panel:
    """Mode, epochs, steps (when they bound the run), items, iteration, items/s and ETA."""
    ips = f"{frame.items_per_second:.1f}" if frame.items_per_second is not None else "---"
    rows = [
        ("Mode", frame.mode),
        ("Tests" if frame.evaluating else "Epochs", f"{frame.epoch}/{frame.total_epochs}"),
        *(
            [("Steps", f"{frame.step}/{frame.total_steps}")]
            if frame.total_steps is not None
            else []
        ),
        ("Items", _items(frame)),
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


def _items(frame: Frame) -> str:
    """The split's items done, out of its total when known (a stream's is not)."""
    if frame.split_total is None:
        return str(frame.split_done)
    return f"{frame.split_done}/{frame.split_total}"


def _progress_pane(frame: Frame) -> Panel:
    """Bars for the current split and the whole run, and the stop reason once stopping."""
    grid = Table.grid(expand=True, padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_column(no_wrap=True)
    split_style = _SPLIT_STYLE.get(frame.split, "white") if frame.split else "white"
    total = frame.split_total
    percent = "" if total is None else f" {100 * frame.split_done // total if total else 0:>3}%"
    grid.add_row(
        Text(f"{frame.split.value if frame.split else 'split':<5}", style=split_style),
        ProgressBar(
            total=None if total is None else max(1, total),  # None: rich pulses the bar
            completed=frame.split_done,
            complete_style=split_style,
            finished_style=split_style,
        ),
        f"{_items(frame)} items{percent}",
    )
    grid.add_row(
        Text("total", style="yellow"),
        ProgressBar(
            total=1.0,
            completed=frame.run_fraction,
            complete_style="yellow",
            finished_style="yellow",
        ),
        (
            f"epoch {frame.epoch}/{frame.total_epochs}"
            if frame.total_steps is None
            else f"step {frame.step}/{frame.total_steps}"
        )
        + f" {int(100 * frame.run_fraction):>3}% (ETA {frame.eta})",
    )
    body: RenderableType = grid
    if frame.stopping is not None:
        body = Group(grid, Text(f"Stopping : {frame.stopping}", style="bold red", no_wrap=True))
    return Panel(body, title="Progress", title_align="left")


def _quit_popup() -> Panel:
    """The Quit popup's choices, drawn over the screen after ``q``."""
    text = Text("\n", no_wrap=True)
    for key, what in (
        ("s", "Stop the training."),
        ("c", "Cancel."),
    ):
        text.append(f"  [{key}] ", style="bold cyan")
        text.append(f"{what}\n")
    return Panel(text, title="Quit", border_style="bold red")


def render_frame(frame: Frame, *, keys: bool = True) -> RenderableType:
    """The whole screen for ``frame``: Burn's layout (``docs/renderers.md``); without the
    Controls pane when no key is read (``keys=False``: the notebook's display)."""
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
        *([Layout(_controls_pane(), size=5)] if keys else []),
        Layout(_metrics_pane(frame), ratio=1, minimum_size=6),
        Layout(_status_pane(frame), size=8 if frame.total_steps is None else 9),
    )
    if frame.popup:
        return _Overlay(layout, _quit_popup(), 44, 6)
    return layout


def frame_height(frame: Frame) -> int:
    """The rows ``render_frame(frame, keys=False)`` needs to show every metric's line."""
    metric_lines = sum(1 + len(per_split) for _, per_split in frame.metrics)
    status = 8 if frame.total_steps is None else 9
    progress = 4 if frame.stopping is None else 5
    return max(16, max(6, metric_lines + 2) + status) + progress
