"""NotebookMetricsRenderer: one display updated in place, at most at its rate; the ending and the
summary printed under it; a display that fails never stops training. (A real notebook runs it in
tests/train/test_notebook.py.)"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.train import Interrupter, Learner, LossMetric, SupervisedTraining
from ember.train._renderer.notebook import NotebookMetricsRenderer
from tests.train.fixtures import TinyRegressor, loader

pytest.importorskip("rich")


class Screen:
    """IPython's ``display`` as the renderer calls it: the bundles shown, and how."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.displayed: list[dict[str, str]] = []
        self.updates: list[dict[str, str]] = []
        self.fail_after = fail_after

    def display(self, bundle: dict[str, str], *, raw: bool, display_id: bool) -> Screen:
        assert raw and display_id is True
        self.displayed.append(bundle)
        return self

    def update(self, bundle: dict[str, str], *, raw: bool) -> None:
        if self.fail_after is not None and len(self.updates) >= self.fail_after:
            raise OSError("the kernel's connection is gone")
        self.updates.append(bundle)

    @property
    def last(self) -> str:
        return (self.updates or self.displayed)[-1]["text/plain"]


class Clock:
    """A clock that moves ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def train(
    directory: Path,
    renderer: NotebookMetricsRenderer,
    hook: Callable[[Any], None] | None = None,
    interrupter: Interrupter | None = None,
) -> Any:
    torch.manual_seed(0)
    model = TinyRegressor()
    model.on_train_step = hook
    training = (
        SupervisedTraining(directory, loader(32), loader(8))
        .metrics(LossMetric())
        .num_epochs(2)
        .renderer(renderer)
        .summary()
    )
    if interrupter is not None:
        training = training.with_interrupter(interrupter)
    return training.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))


def test_a_run_is_one_display_updated_in_place_then_its_ending(tmp_path: Path) -> None:
    """One display for the run, every later frame an update of it (the last one finished, with
    the panes but not the keys); then the ending and the summary as text under it."""
    screen, printed = Screen(), io.StringIO()
    renderer = NotebookMetricsRenderer(display=screen.display, stream=printed, clock=Clock(1.0))
    train(tmp_path / "run", renderer)
    assert len(screen.displayed) == 1 and len(screen.updates) > 10  # one a change at 1 s each
    last = screen.last
    for shown in ("Metrics", "Status", "Plots", "Progress", "Mode : Finished", "Epochs : 2/2"):
        assert shown in last
    assert "Controls" not in last and "Quit" not in last
    assert (
        "<pre" in screen.updates[-1]["text/html"] and "Finished" in screen.updates[-1]["text/html"]
    )
    lines = printed.getvalue()
    assert lines.startswith(
        f"Run directory: {tmp_path / 'run'}\nTraining ended after 2 of 2 epochs.\n  train  Loss "
    )
    assert "Learner Summary" in lines


def test_frames_come_at_most_at_the_rate_and_at_every_start_and_end(tmp_path: Path) -> None:
    """With a clock that does not move, only the forced frames are drawn: the first and the
    last, never one per batch."""
    screen = Screen()
    renderer = NotebookMetricsRenderer(
        display=screen.display, stream=io.StringIO(), clock=Clock(0.0)
    )
    train(tmp_path / "run", renderer)
    assert (len(screen.displayed), len(screen.updates)) == (1, 1)
    assert "Mode : Finished" in screen.last


def test_a_stop_shows_its_reason(tmp_path: Path) -> None:
    """A stop mid-epoch: the last frame says why, and the ending says after how many epochs."""
    interrupter, screen, printed = Interrupter(), Screen(), io.StringIO()
    renderer = NotebookMetricsRenderer(
        interrupter, display=screen.display, stream=printed, clock=Clock(1.0)
    )
    calls: list[int] = []

    def stop_in_epoch_two(batch: object) -> None:
        calls.append(1)
        if len(calls) == 10:  # 8 batches an epoch
            interrupter.stop("the stop button")

    result = train(tmp_path / "run", renderer, stop_in_epoch_two, interrupter)
    assert result.stop_reason == "the stop button" and result.last_epoch == 1
    assert "Stopping : the stop button" in screen.last
    assert printed.getvalue().splitlines()[1] == (
        "Training stopped after 1 of 2 epochs: the stop button"
    )


def test_a_display_that_fails_is_closed_and_training_goes_on(tmp_path: Path) -> None:
    """The kernel's display raising: a message under it, no more frames, the run completes."""
    screen, printed = Screen(fail_after=2), io.StringIO()
    renderer = NotebookMetricsRenderer(display=screen.display, stream=printed, clock=Clock(1.0))
    result = train(tmp_path / "run", renderer)
    assert result.succeeded and result.last_epoch == 2
    assert len(screen.updates) == 2
    text = printed.getvalue()
    assert "The notebook display failed and was closed; training goes on." in text
    assert "OSError: the kernel's connection is gone" in text
    assert "Training ended after 2 of 2 epochs." in text


def test_bad_settings_are_refused() -> None:
    """A rate that is not positive, or a width too narrow for the panes."""
    with pytest.raises(ValueError, match="max_refresh_per_second must be > 0, got 0"):
        NotebookMetricsRenderer(max_refresh_per_second=0)
    with pytest.raises(ValueError, match=r"width must be an int of at least 60.*got 20"):
        NotebookMetricsRenderer(width=20)
