"""The TUI renderer driven through its protocol on an in-memory terminal (Burn's layout)."""

from __future__ import annotations

import io
import os
import pty
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from rich.console import Console

from ember.extend import MetricAttributes, MetricDefinition, MetricEntry, MetricState, NumericEntry
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerSummary,
    LossMetric,
    MetricSummary,
    Split,
    SupervisedTraining,
    TuiMetricsRenderer,
)
from ember.train._renderer.tui.renderer import STOP_REASON
from tests.train.fixtures import TinyRegressor, loader
from tests.train.renderer.tui.screen import Screen, strip_ansi

LOSS = MetricDefinition("Loss", attributes=MetricAttributes())
ACCURACY = MetricDefinition("Accuracy", attributes=MetricAttributes(unit="%"))


def loss(value: float, text: str | Callable[[], str] | None = None) -> MetricState:
    formatted = text if text is not None else f"epoch {value:.2f} - batch {value:.2f}"
    return MetricState(MetricEntry("Loss", formatted, f"{value},1"), NumericEntry(value, 1))


def final(name: str, value: float) -> MetricState:
    entry = MetricEntry(name, f"epoch {value:.2f}", f"{value},final")
    return MetricState(entry, NumericEntry(value, final=True))


def run_epoch(screen: Screen, epoch: int, batches: int = 7, seconds: float = 0.5) -> None:
    """One epoch of 7 train and 2 valid batches, each ``seconds`` long, polling after each."""
    tui, clock = screen.tui, screen.clock
    for split, count, update in (
        (Split.TRAIN, batches, tui.update_train),
        (Split.VALID, 2, tui.update_valid),
    ):
        tui.start_split(split, 32 * count)
        for i in range(1, count + 1):
            clock.now += seconds
            update(loss(10 * epoch + i))
            tui.update_split(32 * i)
            tui.poll()
        update(final("Loss", 10.0 * epoch))
        tui.end_split()
    tui.update_epoch(epoch)


def test_panes_show_metrics_status_and_progress(screen: Screen) -> None:
    """Every pane is drawn with the metric text per split, the status counts and the progress."""
    tui, clock = screen.tui, screen.clock
    tui.register_metric(LOSS)
    tui.register_metric(MetricDefinition("Notes"))  # not numeric: text only, no plot
    tui.start(3, 1)
    tui.start_split(Split.TRAIN, 200)
    clock.now += 1.0
    tui.update_train(loss(2.72, "epoch 4.48 - batch 2.72"))
    tui.update_train(MetricState(MetricEntry("Notes", "all good", "all good")))
    tui.update_split(32)
    clock.now += 1.0
    tui.update_split(64)
    tui.poll()
    frame = screen.frame()
    for pane in ("Controls", "Metrics", "Status", "Plots", "Progress"):
        assert f"─ {pane} " in frame
    assert "Quit : q  Stop the training." in frame
    assert "Train epoch 4.48 - batch 2.72" in frame
    assert "Train all good" in frame
    for line in ("Mode : Training", "Epochs : 1/3", "Items : 64/200", "Iteration : 2", "ETA : ---"):
        assert line in frame
    assert "Items/s : 32.0" in frame  # 64 items in 2 s of the fake clock
    assert "64/200 items  32%" in frame
    assert "Loss · Full history" in frame
    assert "━ Train" in frame

    tui.end_split()
    tui.start_split(Split.VALID, 64)
    clock.now += 1.0
    tui.update_valid(loss(3.5, "epoch 3.50 - batch 3.50"))
    tui.update_split(64)
    tui.poll()
    frame = screen.frame()
    assert "Mode : Validating" in frame
    assert "Valid epoch 3.50 - batch 3.50" in frame
    assert "Items : 64/64" in frame and "Iteration : 1" in frame
    assert "━ Valid" in frame


def test_draws_are_rate_limited_by_the_clock(make_screen: Callable[..., Screen]) -> None:
    """1000 updates over 2 s of the fake clock draw at most 10 frames a second."""
    for rate, most in ((10.0, 21), (2.0, 5)):
        screen = make_screen(max_refresh_per_second=rate)
        tui = screen.tui
        tui.register_metric(LOSS)
        tui.start(1, 1)
        tui.start_split(Split.TRAIN, 1000)
        for i in range(1, 1001):
            screen.clock.now += 0.002
            tui.update_train(loss(1.0))
            tui.update_split(i)
            tui.poll()
        assert most - 2 <= screen.draws <= most


def test_without_news_redraws_only_once_a_second(screen: Screen) -> None:
    """Nothing changed: no frame until a second has passed (for items/s and the ETA)."""
    screen.tui.start(1, 1)
    screen.tui.poll()
    assert screen.draws == 1
    screen.clock.now += 0.5
    screen.tui.poll()
    assert screen.draws == 1
    screen.clock.now += 0.5
    screen.tui.poll()
    assert screen.draws == 2


def test_entry_text_is_formatted_only_when_drawn(screen: Screen) -> None:
    """Updates never format; each frame formats the entries it shows once."""
    calls = 0

    def text() -> str:
        nonlocal calls
        calls += 1
        return "epoch 1.00 - batch 1.00"

    tui = screen.tui
    tui.register_metric(LOSS)
    tui.start(1, 1)
    tui.start_split(Split.TRAIN, 500)
    for i in range(1, 501):
        tui.update_train(loss(1.0, text))
        tui.update_split(i)
    assert calls == 0
    for _ in range(300):
        screen.clock.now += 0.01
        tui.update_train(loss(1.0, text))
        tui.poll()
    assert 29 <= screen.draws <= 31
    assert calls == screen.draws


def test_arrows_switch_metric_and_plot_kind(screen: Screen) -> None:
    """←/→ cycle the plotted metric (wrapping), ↑/↓ cycle Full, Recent and Summary."""
    tui = screen.tui
    tui.register_metric(LOSS)
    tui.register_metric(ACCURACY)
    tui.start(3, 1)
    for epoch in (1, 2, 3):
        run_epoch(screen, epoch)
    steps = [
        (b"", "Loss · Full history"),
        (b"\x1b[C", "Accuracy · Full history"),
        (b"\x1b[C", "Loss · Full history"),
        (b"\x1b[D", "Accuracy · Full history"),
        (b"\x1b[D", "Loss · Full history"),
        (b"\x1b[B", "Loss · Recent history"),
        (b"\x1b[B", "Loss · Summary"),
        (b"\x1b[B", "Loss · Full history"),
        (b"\x1bOA", "Loss · Summary"),  # arrows in application cursor mode too
    ]
    for keys, title in steps:
        screen.clock.now += 0.1
        screen.press(keys)
        assert title in screen.frame()
    frame = screen.frame()
    assert "epoch 1" in frame and "epoch 3" in frame  # x axis of the per-epoch plot
    assert "30.00" in frame and "10.00" in frame  # y range: the epoch values 10, 20, 30


def test_quit_popup_s_stops_training_with_the_reason(screen: Screen) -> None:
    """q opens the popup without stopping; s stops through the interrupter and says so."""
    screen.tui.start(2, 1)
    screen.press(b"q")
    frame = screen.frame()
    assert "─ Quit ─" in frame
    assert "[s] Stop the training." in frame and "[c] Cancel." in frame
    screen.clock.now += 0.1
    screen.press(b"k")  # no kill key: ignored
    assert "─ Quit ─" in screen.frame()
    assert not screen.interrupter.should_stop()

    screen.clock.now += 0.1
    screen.press(b"\x1b[C")  # ignored while the popup is open
    assert "─ Quit ─" in screen.frame()
    screen.clock.now += 0.1
    screen.press(b"s")
    assert screen.interrupter.should_stop()
    assert screen.interrupter.message == STOP_REASON == "Stopping training from user input."
    frame = screen.frame()
    assert "─ Quit ─" not in frame
    assert f"Stopping : {STOP_REASON}" in frame

    screen.tui.close()
    assert f"Training stopped after 0 of 2 epochs: {STOP_REASON}" in screen.after_exit()


def test_a_stop_inside_an_epoch_shows_the_last_completed_epochs_values(screen: Screen) -> None:
    """Issue 12, item 9: q then s in the middle of epoch 2 abandons it; the values printed are
    epoch 1's, not the partial epoch's mean, and the partial epoch is said not to be kept."""
    tui = screen.tui
    tui.register_metric(LOSS)
    tui.start(3, 1)
    run_epoch(screen, 1)
    tui.start_split(Split.TRAIN, 224)
    screen.clock.now += 0.5
    tui.update_train(loss(99.0))
    tui.update_split(32)
    screen.press(b"q")
    screen.clock.now += 0.1
    screen.press(b"s")
    tui.update_train(final("Loss", 99.0))  # the abandoned pass's mean, as the split ends
    tui.end_split()
    tui.end()
    tui.close()
    after = screen.after_exit().splitlines()
    assert after[:4] == [
        f"Training stopped after 1 of 3 epochs: {STOP_REASON}",
        "  epoch 2 was stopped partway and not kept (a resume trains it again); the values "
        "are epoch 1's",
        "  train  Loss 10",
        "  valid  Loss 10",
    ]
    assert not any("99" in line for line in after)


@pytest.mark.parametrize("key", [b"c", b"\x1b"])
def test_quit_popup_c_or_escape_cancels(screen: Screen, key: bytes) -> None:
    """c (or Esc) closes the popup and training goes on."""
    screen.tui.start(2, 1)
    screen.press(b"q")
    assert "─ Quit ─" in screen.frame()
    screen.clock.now += 0.1
    screen.press(key)
    screen.tui.poll()  # a lone Esc is known once no sequence follows it
    assert "─ Quit ─" not in screen.frame()
    assert not screen.interrupter.should_stop()


def test_close_restores_the_terminal_then_prints_the_summary(screen: Screen) -> None:
    """close() shows the cursor and leaves the alternate screen before printing the summary."""
    tui = screen.tui
    tui.register_metric(LOSS)
    tui.start(1, 1)
    run_epoch(screen, 1)
    tui.end()
    summary = LearnerSummary(1, (MetricSummary("Train", "Loss", 10.0, 1, 10.0, 1),))
    tui.on_train_end(summary)
    raw = screen.raw
    assert raw.count("\x1b[?1049h") == 1 and "\x1b[?1049l" not in raw
    tui.close()
    raw = screen.raw
    assert raw.index("\x1b[?25h") > raw.index("\x1b[?1049h")
    after = screen.after_exit()
    assert after.startswith("Training ended after 1 of 1 epochs.\n")
    assert "train  Loss 10" in after and "valid  Loss 10" in after
    assert str(summary) in after
    tui.close()  # idempotent: nothing printed twice
    assert screen.after_exit() == after


def test_the_run_directory_is_printed_before_the_screen_is_taken(screen: Screen) -> None:
    """on_run_directory prints on the normal screen, so the line stays once the TUI leaves."""
    screen.tui.on_run_directory(Path("runs/digits/version_3"))
    screen.tui.start(1, 1)
    screen.tui.poll()
    before, entered, _ = screen.raw.partition("\x1b[?1049h")
    assert entered and strip_ansi(before).strip() == "Run directory: runs/digits/version_3"


def test_on_error_restores_the_terminal_and_prints_the_error(screen: Screen) -> None:
    """on_error leaves the alternate screen first, then prints the error on one line."""
    screen.tui.start(1, 1)
    screen.tui.poll()
    try:
        raise ValueError("bad batch")
    except ValueError as error:
        screen.tui.on_error(error)
    after = screen.after_exit()
    assert after.startswith("Training failed: ValueError: bad batch\n")
    assert "Traceback" not in after


def test_a_failure_while_drawing_restores_the_terminal(screen: Screen) -> None:
    """An exception inside the renderer gives the terminal back, is shown, and training goes on."""

    def broken() -> str:
        raise RuntimeError("cannot format")

    tui = screen.tui
    tui.register_metric(LOSS)
    tui.start(1, 1)
    tui.start_split(Split.TRAIN, 64)
    tui.update_train(loss(1.0, broken))
    tui.poll()
    after = screen.after_exit()
    assert after.startswith("The terminal UI failed and was closed; training goes on.")
    assert "RuntimeError: cannot format" in after
    draws = screen.draws
    tui.update_train(loss(2.0))  # later calls are harmless
    screen.clock.now += 1
    tui.poll()
    tui.close()
    assert screen.draws == draws


def test_cbreak_mode_is_set_on_a_terminal_and_restored(make_screen: Callable[..., Screen]) -> None:
    """On a real terminal, keys are read in cbreak mode and the mode is restored at close."""
    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        screen = make_screen(input_stream=slave)
        screen.tui.start(1, 1)
        during = termios.tcgetattr(slave)
        assert not during[3] & (termios.ICANON | termios.ECHO)
        os.write(master, b"q")
        screen.tui.poll()
        assert "─ Quit ─" in screen.frame()
        screen.tui.close()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def wait_until(condition: Callable[[], bool], seconds: float = 10) -> bool:
    """Poll ``condition`` until it holds or ``seconds`` pass; returns its last value."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def test_train_renderer_thread_reads_keys_and_stops_at_close(
    make_screen: Callable[..., Screen],
) -> None:
    """Threaded: a thread named train-renderer draws and handles keys; close() ends it."""
    screen = make_screen(threaded=True)
    screen.tui.start(5, 1)
    assert any(t.name == "train-renderer" for t in threading.enumerate())
    screen.type(b"q")
    assert wait_until(lambda: "[c] Cancel." in strip_ansi(screen.raw))  # the popup was drawn
    screen.type(b"s")
    assert wait_until(screen.interrupter.should_stop)
    assert screen.interrupter.message == STOP_REASON
    screen.tui.close()
    assert not any(t.name == "train-renderer" for t in threading.enumerate())
    assert "\x1b[?1049l" in screen.raw


def test_refresh_rate_must_be_positive() -> None:
    """The rate is validated at construction, naming the argument."""
    with pytest.raises(ValueError, match="max_refresh_per_second must be > 0, got 0"):
        Screen(max_refresh_per_second=0)


def test_eta_appears_after_the_warm_up(screen: Screen) -> None:
    """The ETA is --- until 10 items and 10 s have passed, then extrapolates the run's pace."""
    tui, clock = screen.tui, screen.clock
    tui.start(2, 1)
    tui.start_split(Split.TRAIN, 100)
    clock.now = 9.0
    tui.update_split(50)
    tui.poll()
    assert "epoch 1/2  25% (ETA ---)" in screen.frame()
    clock.now = 11.0
    tui.update_split(55)
    tui.poll()
    assert "epoch 1/2  27% (ETA 29 secs)" in screen.frame()  # 145 items left at 5 items/s
    assert "ETA : 29 secs" in screen.frame()


@pytest.mark.parametrize("source", ["end of input", "bad descriptor", "stdin without a file"])
def test_the_screen_goes_on_when_keys_cannot_be_read(
    make_screen: Callable[..., Screen], source: str
) -> None:
    """Input at its end, broken or missing: no keys, but the screen is still drawn."""
    read, write = os.pipe()
    os.close(write)
    stream = {"end of input": read, "bad descriptor": -1, "stdin without a file": None}[source]
    screen = make_screen(input_stream=stream)  # None: stdin, which pytest gives no descriptor
    try:
        screen.tui.start(1, 1)
        for _ in range(3):
            screen.clock.now += 1
            screen.tui.poll()
        assert "─ Status ─" in screen.frame()
        assert "terminal UI failed" not in screen.raw
    finally:
        os.close(read)


def test_evaluation_mode_counts_tests_and_prints_the_summary(screen: Screen) -> None:
    """An evaluation: Mode : Evaluation, tests counted in the Status pane, test values drawn as
    Test; the table is printed once the terminal is back."""
    from ember.train import EvaluationSummary, TestValue

    tui, clock = screen.tui, screen.clock
    tui.register_metric(LOSS)
    tui.start_evaluation(2)
    tui.start_test("test", 64)
    clock.now += 1.0
    tui.update_test("test", loss(0.5, "epoch 0.50 - batch 0.50"))
    tui.update_split(32)
    tui.poll()
    frame = screen.frame()
    for line in ("Mode : Evaluation", "Tests : 1/2", "Items : 32/64"):
        assert line in frame
    assert "Test epoch 0.50 - batch 0.50" in frame
    tui.update_test("test", final("Loss", 0.5))
    tui.end_test()
    tui.start_test("hard", 8)
    clock.now += 1.0
    tui.poll()
    assert "Tests : 2/2" in screen.frame()
    tui.end_test()
    tui.end_evaluation()
    summary = EvaluationSummary((TestValue("test", "Loss", 0.5),))
    tui.on_test_end(summary)
    tui.close()
    after = screen.after_exit()
    assert after.startswith("Evaluation ended after 2 of 2 tests.\n")
    assert str(summary) in after


def test_a_stream_shows_counts_without_a_total_or_eta(screen: Screen) -> None:
    """A split of unknown length (a streaming loader) shows the items done, no total, no ETA."""
    tui, clock = screen.tui, screen.clock
    tui.start(1, 1)
    tui.start_split(Split.TRAIN, None)
    clock.now = 20.0
    tui.update_split(96)
    tui.poll()
    frame = screen.frame()
    assert "Items : 96\n" in frame or "Items : 96 " in frame
    assert "96 items" in frame and "/None" not in frame
    assert "ETA : ---" in frame


def test_a_run_bounded_by_steps_shows_steps_and_an_eta_from_them(screen: Screen) -> None:
    """max_steps bounds the run: the Status and Progress panes count optimizer steps out of the
    run's, and the ETA is the steps left at the pace of the steps taken since the start (here a
    resume at step 100 of 400: 150 steps in 15 s, 150 left); a resumed split's items before it
    count as done but not in its speed."""
    tui, clock = screen.tui, screen.clock
    tui.start(8, 3)
    tui.start_steps(400, 100)
    tui.start_split(Split.TRAIN, None)
    tui.resume_split(3200)
    clock.now = 15.0
    tui.update_step(250)
    tui.update_split(8000)
    tui.poll()
    frame = screen.frame()
    assert "Steps : 250/400" in frame
    assert "Items : 8000" in frame and "Items/s : 320.0" in frame  # 4800 items in 15 s
    assert "step 250/400  62% (ETA 15 secs)" in frame
    assert "ETA : 15 secs" in frame


def stopped_in_epoch_2(directory: Path, *, checkpoints: bool) -> str:
    """Train 3 epochs of 6 batches with the TUI on an in-memory terminal; the person confirms
    Quit (the interrupter's stop) at the 3rd batch of epoch 2. What the TUI printed after."""
    builder = SupervisedTraining(directory, loader(24, 4), loader(8, 4)).metrics(LossMetric())
    if checkpoints:
        builder = builder.with_default_checkpointers()
    output = io.StringIO()
    console = Console(file=output, force_terminal=True, width=120, height=40)
    tui = TuiMetricsRenderer(builder.interrupter(), console=console, threaded=False)
    model, batches = TinyRegressor(), iter(range(1, 100))

    def stop_at_the_ninth_batch(batch: object) -> None:
        if next(batches) == 9:
            builder.interrupter().stop(STOP_REASON)

    model.on_train_step = stop_at_the_ninth_batch
    result = (
        builder.renderer(tui)
        .num_epochs(3)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1))
    )
    assert result.error is None and result.stop_reason == STOP_REASON
    return strip_ansi(output.getvalue().rsplit("\x1b[?1049l", 1)[1])


def test_a_stop_that_wrote_a_step_checkpoint_says_the_resume_continues_from_it(
    tmp_path: Path,
) -> None:
    """Issue 29, item 15: the epilogue said "epoch 2 was stopped partway and not kept (a resume
    trains it again)" while a step-9 checkpoint was written and a resume continues from it;
    it now says so, and it is true: the checkpoint is there and a resume goes on after it. A
    run without checkpointers still says the epoch was not kept."""
    after = stopped_in_epoch_2(tmp_path / "run", checkpoints=True)
    assert (
        "  epoch 2 was stopped partway and its progress kept in a step checkpoint "
        "(checkpoint/step-N/): a resume continues from it; the values are epoch 1's"
    ) in after
    assert "not kept" not in after
    assert [p.name for p in (tmp_path / "run" / "checkpoint").glob("step-*")] == ["step-9"]
    resumed = io.StringIO()
    model = TinyRegressor()
    result = (
        SupervisedTraining(tmp_path / "run", loader(24, 4), loader(8, 4))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .resume_latest()
        .renderer(CliMetricsRenderer(resumed))
        .num_epochs(3)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1))
    )
    assert result.error is None and result.last_epoch == 3
    assert "Resuming after 12 items." in resumed.getvalue()  # 3 batches of epoch 2 kept
    without = stopped_in_epoch_2(tmp_path / "plain", checkpoints=False)
    assert "  epoch 2 was stopped partway and not kept (a resume trains it again)" in without
