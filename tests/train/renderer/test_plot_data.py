"""The TUI's plot data, braille raster, key decoding and ETA text."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from ember.train import Split
from ember.train._renderer.plot_data import (
    FULL_HISTORY_POINTS,
    RECENT_POINTS,
    BrailleCanvas,
    MetricPlot,
    PlotKind,
    Series,
    data_range,
)
from ember.train._renderer.tui.renderer import decode_keys, format_eta


@given(st.integers(min_value=0, max_value=5000))
def test_full_history_keeps_at_most_250_evenly_spaced_points(count: int) -> None:
    """Past 250 points every other one is dropped and the step doubles; spacing stays even."""
    series = Series()
    for i in range(count):
        series.add(i, float(i))
    assert len(series.full) <= FULL_HISTORY_POINTS
    assert [x for x, _ in series.full] == list(range(0, count, series.step))
    if count > FULL_HISTORY_POINTS:
        assert len(series.full) > FULL_HISTORY_POINTS // 2


def test_recent_history_keeps_the_last_1000_points() -> None:
    """Recent history is the last 1000 points at full resolution."""
    series = Series()
    for i in range(2500):
        series.add(i, float(i))
    assert [x for x, _ in series.recent] == list(range(1500, 2500))
    assert len(series.recent) == RECENT_POINTS


def test_metric_plot_shares_x_across_splits_and_keeps_epoch_values() -> None:
    """Valid points follow the train points on one x axis; epoch values go to the summary."""
    plot = MetricPlot("Loss")
    plot.add(Split.TRAIN, 3.0)
    plot.add(Split.TRAIN, 2.0)
    plot.add_epoch(Split.TRAIN, 1, 2.5)
    plot.add(Split.VALID, 2.2)
    plot.add_epoch(Split.VALID, 1, 2.2)
    plot.add_epoch(Split.VALID, 1, 2.1)  # the same epoch again replaces it
    full = plot.points(PlotKind.FULL)
    assert full == {Split.TRAIN: [(1, 3.0), (2, 2.0)], Split.VALID: [(3, 2.2)]}
    assert plot.points(PlotKind.RECENT) == full
    assert plot.points(PlotKind.SUMMARY) == {
        Split.TRAIN: [(1, 2.5)],
        Split.VALID: [(1, 2.1)],
    }


def test_plot_kinds_cycle_both_ways() -> None:
    """Full → Recent → Summary → Full, and back."""
    assert [PlotKind.FULL.next(), PlotKind.RECENT.next(), PlotKind.SUMMARY.next()] == [
        PlotKind.RECENT,
        PlotKind.SUMMARY,
        PlotKind.FULL,
    ]
    assert PlotKind.FULL.previous() is PlotKind.SUMMARY


def test_braille_canvas_draws_a_diagonal_and_skips_nan() -> None:
    """A rising line fills the corners; a NaN breaks the line; owners colour cells."""
    canvas = BrailleCanvas(4, 2, (0.0, 1.0), (0.0, 1.0))
    canvas.plot([(0.0, 0.0), (1.0, 1.0)], 0)
    rows = canvas.rows()
    assert rows[1][0][0] != " " and rows[0][3][0] != " "  # bottom left to top right
    assert rows[0][0] == (" ", None) and rows[1][3] == (" ", None)
    assert all(0x2800 <= ord(char) <= 0x28FF for row in rows for char, _ in row if char != " ")

    canvas = BrailleCanvas(4, 1, (0.0, 3.0), (0.0, 1.0))
    canvas.plot([(0.0, 0.5), (1.0, math.nan), (3.0, 0.5)], 1)
    drawn = [cell for cell in canvas.rows()[0] if cell[0] != " "]
    assert len(drawn) == 2 and {owner for _, owner in drawn} == {1}


def test_data_range_ignores_non_finite_and_widens_flat_data() -> None:
    """Flat data gets a visible range; no finite value gives None."""
    assert data_range([1.0, math.inf, 3.0]) == (1.0, 3.0)
    assert data_range([2.0, 2.0]) == (1.9, 2.1)
    assert data_range([0.0]) == (-1.0, 1.0)
    assert data_range([math.nan]) is None


def test_keys_are_decoded_from_terminal_bytes() -> None:
    """Arrows in both cursor modes, letters, a lone Esc, skipped sequences and split reads."""
    assert decode_keys(b"q\x1b[A\x1b[B\x1bOC\x1b[DS") == (
        ["q", "up", "down", "right", "left", "s"],
        b"",
    )
    assert decode_keys(b"\x1b[15~c") == (["c"], b"")  # F5 skipped
    assert decode_keys(b"\x1bx") == (["escape", "x"], b"")
    assert decode_keys(b"k\x1b") == (["k"], b"\x1b")  # Esc or the start of a sequence
    assert decode_keys(b"\x1b[") == ([], b"\x1b[")
    _, rest = decode_keys(b"\x1b[")
    assert decode_keys(rest + b"C") == (["right"], b"")


def test_eta_text() -> None:
    """Burn's units; --- while unknown."""
    assert [format_eta(s) for s in (None, 5, 59.4, 60, 3599, 7200, 3 * 86400)] == [
        "---",
        "5 secs",
        "59 secs",
        "1 mins",
        "59 mins",
        "2 hours",
        "3 days",
    ]


def test_recent_history_shows_one_window_for_all_splits() -> None:
    """Once a split drops old points, the others are cut to the x range it still covers."""
    plot = MetricPlot("Loss")
    for _ in range(5):
        for _ in range(RECENT_POINTS // 2):
            plot.add(Split.TRAIN, 1.0)
        plot.add(Split.VALID, 2.0)
    recent = plot.points(PlotKind.RECENT)
    start = recent[Split.TRAIN][0][0]
    assert len(recent[Split.TRAIN]) == RECENT_POINTS
    assert all(x >= start for x, _ in recent[Split.VALID])
    assert start == 1504  # rounds of 500 train points then 1 valid point
    assert [x for x, _ in recent[Split.VALID]] == [2004, 2505]
