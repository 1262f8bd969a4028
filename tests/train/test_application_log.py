"""experiment.log: buffered lines, immediate warnings, nothing left unwritten at the end, every
attempt of a run told from its first line to its last."""

from __future__ import annotations

import io
import logging
import re
import threading
import time
from pathlib import Path

import pytest
import torch

from ember.train import CliMetricsRenderer, Learner, SupervisedTraining
from ember.train._application_log import ExperimentLogHandler, begin_attempt, experiment_log
from ember.train._checkpoint.mid_round import ResumePoint
from tests.train.fixtures import TinyRegressor, loader

LOG = logging.getLogger("ember.train")


def test_lines_are_flushed_at_most_every_interval_and_warnings_at_once(tmp_path: Path) -> None:
    """INFO lines wait for the interval; a warning reaches the file immediately."""
    now = [0.0]
    path = tmp_path / "experiment.log"
    handler = ExperimentLogHandler(path, interval=1.0, clock=lambda: now[0], deferred=False)
    logger = logging.getLogger("ember.test.buffered")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("first")
        assert path.read_text() == ""
        now[0] = 1.5
        logger.info("second")
        assert path.read_text().count("INFO") == 2
        logger.info("third")
        assert "third" not in path.read_text()
        logger.warning("careful")
        text = path.read_text()
        assert "third" in text and "WARNING ember.test.buffered: careful" in text
    finally:
        logger.removeHandler(handler)
        handler.close()


def test_block_writes_everything_and_removes_the_handler(tmp_path: Path) -> None:
    """experiment_log() leaves no handler behind and the file complete, also on an error."""
    path = tmp_path / "run" / "experiment.log"
    before = list(logging.getLogger("ember").handlers)
    try:
        with experiment_log(path):
            logging.getLogger("ember.train").info("inside")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert "INFO ember.train: inside" in path.read_text()
    assert logging.getLogger("ember").handlers == before


def test_a_line_is_flushed_by_the_timer_without_a_next_line(tmp_path: Path) -> None:
    """A line logged right after a flush reaches the file one interval later with no line
    after it (a process killed then loses at most that interval); closing stops the timer."""
    path = tmp_path / "experiment.log"
    handler = ExperimentLogHandler(path, interval=0.05)
    logger = logging.getLogger("ember.test.timer")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        logger.info("alone")
        deadline = time.monotonic() + 30
        while "alone" not in path.read_text() and time.monotonic() < deadline:
            threading.Event().wait(0.01)  # waits for the file, not for a race to pass
        assert "INFO ember.test.timer: alone" in path.read_text()
    finally:
        logger.removeHandler(handler)
        handler.close()
    assert not [t for t in threading.enumerate() if t.name == "experiment-log-flush"]


def attempt(path: Path, resume: ResumePoint | None, *, fail: bool = False) -> None:
    """One attempt's log: a warning before its first line, then its start, an error if
    ``fail``."""
    with experiment_log(path, attempt=True) as handler:
        LOG.warning("a checkpoint was skipped")
        begin_attempt(handler, resume)
        LOG.info("training")
        if fail:
            try:
                raise ValueError("the step failed\nsecond line")
            except ValueError:
                LOG.error("Training failed", exc_info=True)


def lines(path: Path) -> list[str]:
    """The log's lines without their date and time, tracebacks left out."""
    return [
        line.split(" ", 2)[2]
        for line in path.read_text(encoding="utf-8").splitlines()
        if re.match(r"\d{4}-\d\d-\d\d ", line)
    ]


def test_every_attempt_is_kept_from_its_first_line_to_its_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three attempts append to one log: each starts with a line naming it (pid, host,
    torchrun's restart count), where it resumes from and how the one before ended (a failure's
    first line), then the lines held before it, and ends with its end line."""
    path = tmp_path / "experiment.log"
    attempt(path, None)
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")
    attempt(path, ResumePoint(1), fail=True)
    attempt(path, ResumePoint(2, 10))
    found = lines(path)
    head = r"INFO ember\.train: Attempt of pid \d+ on \S+"
    expected = [
        rf"{head}: starts afresh; the first attempt in this log",
        "WARNING ember.train: a checkpoint was skipped",
        "INFO ember.train: training",
        r"INFO ember\.train: Attempt of pid \d+ ended",
        rf"{head} \(torchrun restart 1 of at most 3\): resumes from the checkpoint of epoch 1; "
        "the attempt before it ended",
        "WARNING ember.train: a checkpoint was skipped",
        "INFO ember.train: training",
        "ERROR ember.train: Training failed",
        r"INFO ember\.train: Attempt of pid \d+ ended: training failed \(ValueError: the step "
        r"failed\)",
        rf"{head} \(torchrun restart 1 of at most 3\): resumes from the checkpoint of step 10 "
        r"\(in epoch 2\); the attempt before it ended: training failed \(ValueError: the step "
        r"failed\)",
    ]
    assert len(found) == len(expected) + 3
    for line, pattern in zip(found, expected, strict=False):
        assert re.fullmatch(pattern, line), (line, pattern)


def test_an_attempt_after_one_that_was_killed_quotes_its_last_line(tmp_path: Path) -> None:
    """The log of a killed attempt has no end line: the next attempt says so and quotes the
    last line it left; an attempt that ends before training says that."""
    path = tmp_path / "experiment.log"
    path.write_text("2026-01-01 00:00:00,000 INFO ember.train: Iterations 1-4 of epoch 3\n")
    with experiment_log(path, attempt=True):
        pass  # launch returned before training (the run was complete)
    first = lines(path)[1]
    assert first.endswith(
        "ended before training; the attempt before it did not end (killed, or its machine "
        "lost), its last line: '2026-01-01 00:00:00,000 INFO ember.train: Iterations 1-4 of "
        "epoch 3'"
    )


def test_a_resumed_launch_appends_its_attempt_after_the_first(tmp_path: Path) -> None:
    """A launch, then a resume_latest() launch of the same run: experiment.log keeps both
    attempts, the second saying where it resumed from and that the first ended."""
    for epochs in (1, 2):
        model = TinyRegressor()
        builder = (
            SupervisedTraining(tmp_path, loader(8, 4), loader(4, 4))
            .renderer(CliMetricsRenderer(io.StringIO()))
            .with_default_checkpointers()
            .num_epochs(epochs)
        )
        builder.resume_latest().launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    starts = [line for line in lines(tmp_path / "experiment.log") if ": Attempt of pid" in line]
    assert len(starts) == 4
    assert starts[0].endswith("starts afresh; the first attempt in this log")
    assert re.search(r"ended$", starts[1])
    assert starts[2].endswith("resumes from the checkpoint of epoch 1; the attempt before it ended")
    assert re.search(r"ended$", starts[3])
