"""examples/digits_config.py: the digits classifier trained entirely from its YAML file, with
command-line overrides, recorded in its run and run again from that record."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ember
from ember.train import load_checkpoint

pytest.importorskip("jsonargparse", reason="ember.cli needs jsonargparse: pip install ember[cli]")
pytest.importorskip("sklearn", reason="the digits are scikit-learn's: pip install ember[examples]")
yaml = pytest.importorskip("yaml")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SCRIPT, CONFIG = EXAMPLES / "digits_config.py", EXAMPLES / "digits_config.yaml"


def test_the_yaml_file_trains_the_digits_and_the_run_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`python examples/digits_config.py --config digits_config.yaml` with overrides trains and
    learns; config.json holds the file's values with the overrides; the run's config.yaml
    trains the same weights again, in the next version."""
    runs = tmp_path / "runs"
    overrides = ["--directory", str(runs), "--epochs", "2", "--optimizer.lr", "0.01"]
    command = [sys.executable, str(SCRIPT), "--config", str(CONFIG), *overrides]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert finished.returncode == 0, finished.stderr
    assert "Learner Summary" in finished.stdout
    first = runs / "version_0"
    expected = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    expected.update(directory=str(runs), epochs=2)
    expected["optimizer"]["lr"] = 0.01
    assert json.loads((first / "config.json").read_text(encoding="utf-8"))["cli"] == expected

    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("digits_config")
    again = ember.cli(example.main, args=["--config", str(first / "config.yaml")])
    assert again.succeeded and again.directory == runs / "version_1"
    assert again.values("valid", "Accuracy")[2] > 80.0  # it learned: ~90% after two epochs
    before = load_checkpoint(first, "last", into=example.Mlp(example.Model()))
    for (name, weight), rerun in zip(
        before.state_dict().items(), again.model.state_dict().values(), strict=True
    ):
        assert torch.equal(rerun, weight), name
