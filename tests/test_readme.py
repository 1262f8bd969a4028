"""The README's first code example runs as written, in a fresh directory."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def first_python_example() -> str:
    match = re.search(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert match is not None, "README.md has no python example"
    return match.group(1)


@pytest.mark.timeout(240)
def test_the_first_readme_example_runs_as_written(tmp_path: Path) -> None:
    """Run in a child process (its own import of ember, as a user's script has): it trains 3
    epochs, writes the run directory and prints the three logged valid losses, falling."""
    script = tmp_path / "example.py"
    script.write_text(first_python_example(), encoding="utf-8")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=200,
        env=environment,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    values = [float(v) for v in re.findall(r"\d+: ([0-9.e+-]+)", last)]
    assert re.fullmatch(r"\{1: .*, 2: .*, 3: .*\}", last), last
    assert len(values) == 3 and values[2] < values[0], last
    assert (tmp_path / "artifacts" / "run" / "valid" / "epoch-3" / "Loss.log").is_file()
