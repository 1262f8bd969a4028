"""examples/custom_renderer.py: the smallest renderer, used for a real run."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from ember.extend import MetricsRenderer

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_custom_renderer_prints_one_line_per_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The example satisfies the renderer protocol and prints each epoch's values."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("custom_renderer")
    assert isinstance(example.EpochLineRenderer(), MetricsRenderer)

    result = example.main(["--epochs", "3", "--dir", str(tmp_path / "run")])
    assert result.error is None and result.last_epoch == 3
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3
    for epoch, line in enumerate(lines, start=1):
        assert re.fullmatch(
            rf"epoch {epoch}: train Loss \d+\.\d{{4}}  valid Loss \d+\.\d{{4}}", line
        )
    first, last = (float(line.rsplit(" ", 1)[1]) for line in (lines[0], lines[-1]))
    assert last < first  # it trains
