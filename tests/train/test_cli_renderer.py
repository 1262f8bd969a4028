"""The CLI renderer: readable lines, rate-limited progress, values at split end (B6)."""

from __future__ import annotations

import io

from ember.train import CliMetricsRenderer, MetricEntry, MetricState, NumericEntry, Split


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_is_rate_limited_and_values_shown_at_split_end() -> None:
    """100 batches in 2.5 s print ~2 progress lines plus the final one and the epoch value."""
    stream, clock = io.StringIO(), FakeClock()
    renderer = CliMetricsRenderer(stream, interval=1.0, clock=clock)
    renderer.start(3, 1)
    renderer.start_split(Split.TRAIN, 100)
    for i in range(1, 101):
        clock.now += 0.025
        renderer.update_split(i)
        renderer.update_train(MetricState(MetricEntry("Loss", "", f"{i},1"), NumericEntry(i, 1)))
    renderer.update_train(
        MetricState(MetricEntry("Loss", "", "3.5,final"), NumericEntry(3.5, final=True))
    )
    renderer.end_split()
    lines = stream.getvalue().splitlines()
    assert lines[0] == "Starting training for 3 epochs."
    assert lines[1] == "Starting split 'train' with 100 items."
    progress = [line for line in lines if line.startswith("[epoch")]
    assert 2 <= len(progress) <= 4
    assert progress[-1] == "[epoch 1/3] train 100/100 items (100%)"
    assert lines[-1] == "Split ended.  Loss 3.5"


def test_error_is_printed_with_traceback() -> None:
    """on_error prints the error type, message and traceback."""
    stream = io.StringIO()
    try:
        raise ValueError("bad")
    except ValueError as error:
        CliMetricsRenderer(stream).on_error(error)
    text = stream.getvalue()
    assert text.startswith("Training failed: ValueError: bad")
    assert "Traceback" in text


def test_resume_is_announced() -> None:
    """Starting past epoch 1 says so."""
    stream = io.StringIO()
    CliMetricsRenderer(stream).start(5, 3)
    assert stream.getvalue() == "Starting training for 5 epochs. (resuming at epoch 3)\n"
