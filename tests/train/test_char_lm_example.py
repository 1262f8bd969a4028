"""examples/char_lm.py: a character LM over a streamed text, in steps, resumed."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from tests.train.fixtures import read_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_char_lm_trains_validates_checkpoints_and_resumes_in_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("char_lm")
    run = tmp_path / "run"
    tiny = ["--every", "3", "--chars", "3000", "--context", "16", "--batch", "8", "--dir", str(run)]
    result = example.main(["--steps", "6", *tiny])
    assert result.error is None, result.traceback
    assert result.last_epoch == 2  # two validations: after steps 3 and 6
    assert (run / "checkpoint" / "manifest-2.json").exists()
    perplexity = read_lines(run / "valid" / "epoch-2" / "Perplexity.log")
    assert perplexity[-1].endswith(",final")
    with pytest.warns(UserWarning, match="first 48 items of the pass will be read again"):
        resumed = example.main(["--steps", "9", "--resume", *tiny])  # a buffer is not state
    assert resumed.error is None, resumed.traceback
    assert resumed.last_epoch == 3
    assert len(read_lines(run / "train" / "epoch-3" / "Loss.log")) == 4  # 3 batches + final
