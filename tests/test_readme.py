"""The README's code examples run as written, in a fresh directory: the first one, and the
shortest path's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def first_python_example(after: str = "") -> str:
    """The first python example of README.md, or the first after the line ``after``."""
    text = README.read_text(encoding="utf-8")
    text = text[text.index(after) :] if after else text
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match is not None, "README.md has no python example"
    return match.group(1)


def run_example(code: str, directory: Path) -> str:
    """Run ``code`` in a child process (its own import of ember, as a user's script has) in
    ``directory``; its standard output."""
    script = directory / "example.py"
    script.write_text(code, encoding="utf-8")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=200,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(240)
def test_the_first_readme_example_runs_as_written(tmp_path: Path) -> None:
    """Run in a child process (its own import of ember, as a user's script has): it trains 3
    epochs, writes the run directory and prints the three logged valid losses, falling."""
    last = run_example(first_python_example(), tmp_path).strip().splitlines()[-1]
    values = [float(v) for v in re.findall(r"\d+: ([0-9.e+-]+)", last)]
    assert re.fullmatch(r"\{1: .*, 2: .*, 3: .*\}", last), last
    assert len(values) == 3 and values[2] < values[0], last
    assert (tmp_path / "artifacts" / "run" / "valid" / "epoch-3" / "Loss.log").is_file()


@pytest.mark.timeout(240)
def test_the_shortest_path_example_runs_as_written(tmp_path: Path) -> None:
    """The plain CNN of "The shortest path" trains 5 epochs with no model class, told
    classification: it prints the valid Accuracy of each epoch, well above chance at the end."""
    pytest.importorskip("sklearn")
    last = run_example(first_python_example("## The shortest path"), tmp_path)
    values = [float(v) for v in re.findall(r"\d+: ([0-9.e+-]+)", last.strip().splitlines()[-1])]
    assert len(values) == 5 and values[-1] > 50, last
    assert "trains as task='classification'" in (
        tmp_path / "artifacts" / "cnn" / "experiment.log"
    ).read_text(encoding="utf-8")
