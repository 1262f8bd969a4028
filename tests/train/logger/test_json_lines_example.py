"""examples/json_lines_logger.py: a tracker in 15 lines, used for a real run."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from ember.extend import MetricLogger, MetricReader
from ember.train import FileMetricLogger, Split

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_json_lines_logger_records_numbers_steps_config_and_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example satisfies the logger protocol; its file holds the configuration, every value
    with its step (equal to the file logs), and the summary and artifacts."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("json_lines_logger")
    run = tmp_path / "run"
    logger = example.JsonLinesLogger(run / "metrics.jsonl")
    assert isinstance(logger, MetricLogger) and not isinstance(logger, MetricReader)

    result = example.main(["--epochs", "2", "--dir", str(run)])
    assert result.error is None and result.last_epoch == 2
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["config"]["num_epochs"] == 2
    assert records[0]["config"]["hparams"] == {"model": "Mlp"}
    assert "Learner Summary" in records[-1]["summary"]
    assert records[-1]["artifacts"]["summary"] == str(run / "summary.json")
    values = records[1:-1]
    train = [r for r in values if r["split"] == "train" and not r["final"]]
    assert [r["step"] for r in train] == list(range(1, len(train) + 1))  # 7 batches an epoch
    files = FileMetricLogger(run)
    for split in (Split.TRAIN, Split.VALID):
        logged = [r["value"] for r in values if r["split"] == split.value and r["epoch"] == 2]
        assert logged == [e.value for e in files.read_numeric("Loss", 2, split)]
