"""What the TUI's plot pane shows: each numeric metric's values per split, kept in bounded
memory, and a braille raster to draw them with (see ``docs/renderers.md``).

Pure data, no terminal: :class:`MetricPlot` records values as they arrive on the metrics thread
(an append, never any text formatting); :class:`BrailleCanvas` turns point lists into
characters when the TUI draws, at most a few times a second.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from collections.abc import Iterable, Sequence

from ember.train._vocabulary import Split

__all__ = [
    "FULL_HISTORY_POINTS",
    "RECENT_POINTS",
    "BrailleCanvas",
    "MetricPlot",
    "PlotKind",
    "Point",
    "Series",
    "data_range",
]

FULL_HISTORY_POINTS = 250
"""Most points a series keeps for the full history; beyond, every other point is dropped."""
RECENT_POINTS = 1000
"""Points of the recent history, at full resolution."""

Point = tuple[float, float]


class PlotKind(enum.Enum):
    """What the plot pane shows; ↑/↓ cycle through them in this order."""

    FULL = "Full history"
    RECENT = "Recent history"
    SUMMARY = "Summary"

    def next(self) -> PlotKind:
        """The kind after this one (wraps)."""
        kinds = list(PlotKind)
        return kinds[(kinds.index(self) + 1) % len(kinds)]

    def previous(self) -> PlotKind:
        """The kind before this one (wraps)."""
        kinds = list(PlotKind)
        return kinds[(kinds.index(self) - 1) % len(kinds)]


class Series:
    """One metric's batch values on one split: the full history, decimated to at most
    ``max_points`` points, and the last ``recent_points`` points at full resolution.

    Decimation keeps the points whose arrival index is a multiple of a step that doubles each
    time the history would exceed ``max_points``, so the kept points stay evenly spaced.
    """

    __slots__ = ("_seen", "_step", "full", "max_points", "recent")

    def __init__(
        self, max_points: int = FULL_HISTORY_POINTS, recent_points: int = RECENT_POINTS
    ) -> None:
        if max_points < 2:
            raise ValueError(f"max_points must be >= 2, got {max_points}")
        self.max_points = max_points
        self.full: list[Point] = []
        self.recent: deque[Point] = deque(maxlen=recent_points)
        self._step = 1
        self._seen = 0

    @property
    def step(self) -> int:
        """How many arrivals one point of the full history stands for."""
        return self._step

    def add(self, x: float, y: float) -> None:
        """Record a value."""
        point = (x, y)
        self.recent.append(point)
        if self._seen % self._step == 0:
            self.full.append(point)
            if len(self.full) > self.max_points:
                del self.full[1::2]
                self._step *= 2
        self._seen += 1


class MetricPlot:
    """A numeric metric's plot data for every split.

    Batch values share one x axis across splits (a point counter), so the valid points of an
    epoch sit after its train points; epoch values are kept per split against the epoch number.
    """

    __slots__ = ("_x", "epochs", "name", "series")

    def __init__(self, name: str) -> None:
        self.name = name
        self.series: dict[Split, Series] = {}
        self.epochs: dict[Split, list[Point]] = {}
        self._x = 0

    def add(self, split: Split, value: float) -> None:
        """A batch value of ``split``."""
        self._x += 1
        series = self.series.get(split)
        if series is None:
            series = self.series[split] = Series()
        series.add(self._x, value)

    def add_epoch(self, split: Split, epoch: int, value: float) -> None:
        """The epoch value of ``split``; a repeated epoch replaces the earlier value."""
        values = self.epochs.setdefault(split, [])
        if values and values[-1][0] == epoch:
            values[-1] = (epoch, value)
        else:
            values.append((epoch, value))

    def points(self, kind: PlotKind) -> dict[Split, list[Point]]:
        """Copies of the points to draw for ``kind``, per split (safe to use on another thread).

        Recent history shows the x range that every split's last points cover: a series that
        dropped old points cuts the others to its window.
        """
        if kind is PlotKind.SUMMARY:
            return {split: list(values) for split, values in self.epochs.items()}
        if kind is PlotKind.RECENT:
            # one window for all splits: from where the shortest-reaching full series begins
            start = max(
                (s.recent[0][0] for s in self.series.values() if len(s.recent) == s.recent.maxlen),
                default=-math.inf,
            )
            return {
                split: [point for point in series.recent if point[0] >= start]
                for split, series in self.series.items()
            }
        return {split: list(series.full) for split, series in self.series.items()}


# Braille cell dot bits, indexed [row][column] (Unicode braille patterns, U+2800 block).
_DOTS = ((0x01, 0x08), (0x02, 0x10), (0x04, 0x20), (0x40, 0x80))


def data_range(values: Iterable[float]) -> tuple[float, float] | None:
    """The finite min and max of ``values``, widened when they are equal; None if none."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    low, high = min(finite), max(finite)
    if low == high:
        pad = abs(low) * 0.05 or 1.0
        low, high = low - pad, high + pad
    return low, high


class BrailleCanvas:
    """A ``width`` x ``height`` character grid of 2x4 braille dots each.

    Lines are drawn between consecutive finite points of a series; each cell remembers the
    last series that drew in it (its colour when shown).
    """

    def __init__(
        self,
        width: int,
        height: int,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
    ) -> None:
        self.width = max(1, width)
        self.height = max(1, height)
        self._x0, self._x1 = x_range
        self._y0, self._y1 = y_range
        self._bits = [[0] * self.width for _ in range(self.height)]
        self._owner: list[list[int | None]] = [[None] * self.width for _ in range(self.height)]

    def _to_dots(self, point: Point) -> tuple[int, int]:
        x, y = point
        columns, rows = 2 * self.width - 1, 4 * self.height - 1
        fx = (x - self._x0) / (self._x1 - self._x0) if self._x1 != self._x0 else 0.5
        fy = (self._y1 - y) / (self._y1 - self._y0) if self._y1 != self._y0 else 0.5
        return (
            min(columns, max(0, round(fx * columns))),
            min(rows, max(0, round(fy * rows))),
        )

    def _dot(self, column: int, row: int, owner: int) -> None:
        cell_row, cell_column = row // 4, column // 2
        self._bits[cell_row][cell_column] |= _DOTS[row % 4][column % 2]
        self._owner[cell_row][cell_column] = owner

    def plot(self, points: Sequence[Point], owner: int) -> None:
        """Draw ``points`` as a line; non-finite values break it."""
        previous: tuple[int, int] | None = None
        for point in points:
            if not (math.isfinite(point[0]) and math.isfinite(point[1])):
                previous = None
                continue
            current = self._to_dots(point)
            if previous is None:
                self._dot(*current, owner)
            else:
                self._line(previous, current, owner)
            previous = current

    def _line(self, start: tuple[int, int], end: tuple[int, int], owner: int) -> None:
        (x0, y0), (x1, y1) = start, end
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        error = dx + dy
        while True:  # Bresenham
            self._dot(x0, y0, owner)
            if x0 == x1 and y0 == y1:
                return
            doubled = 2 * error
            if doubled >= dy:
                error += dy
                x0 += sx
            if doubled <= dx:
                error += dx
                y0 += sy

    def rows(self) -> list[list[tuple[str, int | None]]]:
        """Each row's cells as (character, owner); empty cells are spaces owned by None."""
        return [
            [
                (chr(0x2800 + bits) if bits else " ", owner)
                for bits, owner in zip(bits_row, owner_row, strict=True)
            ]
            for bits_row, owner_row in zip(self._bits, self._owner, strict=True)
        ]
