"""experiment.log: buffered lines, immediate warnings, nothing left unwritten at the end."""

from __future__ import annotations

import logging
from pathlib import Path

from ember.train._application_log import ExperimentLogHandler, experiment_log


def test_lines_are_flushed_at_most_every_interval_and_warnings_at_once(tmp_path: Path) -> None:
    """INFO lines wait for the interval; a warning reaches the file immediately."""
    now = [0.0]
    path = tmp_path / "experiment.log"
    handler = ExperimentLogHandler(path, interval=1.0, clock=lambda: now[0])
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
