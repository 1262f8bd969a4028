"""The README's code examples run as written, in a fresh directory, each in a child process (its
own import of ember, as a user's script has): every python block of README.md, each under a
heading with its own check of what the example prints and writes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_examples() -> dict[str, str]:
    """Each python block of README.md, keyed by the heading it stands under."""
    found: dict[str, str] = {}
    heading = ""
    text = README.read_text(encoding="utf-8")
    # a fenced block whole (a "# comment" line in it is no heading), or a heading line
    for part in re.split(r"(^```\w*\n.*?^```$|^#+ [^\n]*$)", text, flags=re.M | re.S):
        if part.startswith("#"):
            heading = part
        elif part.startswith("```python\n"):
            assert heading not in found, f"README.md: two python examples under {heading!r}"
            found[heading] = part.removeprefix("```python\n").removesuffix("```")
    return found


def run_example(code: str, directory: Path) -> str:
    """Run ``code`` as a script in ``directory``; its standard output."""
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


def epoch_values(printed: str) -> list[float]:
    """The values of the ``{epoch: value}`` mapping on the last printed line."""
    last = printed.strip().splitlines()[-1]
    assert re.search(r"\{1: .*\}$", last), last
    return [float(v) for v in re.findall(r"\d+: ([0-9.e+-]+)", last)]


def run_directory(printed: str) -> str:
    """The run directory the example printed before its values."""
    return printed.strip().splitlines()[-1].split(" {")[0]


def files_in(directory: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def check_the_shortest_path(printed: str, directory: Path) -> None:
    """The plain CNN trains 5 epochs with no model class, told classification: it prints its
    run directory and the valid Accuracy of each epoch, far above chance (10 %) at the end."""
    values = epoch_values(printed)
    assert len(values) == 5 and values[-1] > 50, printed
    run = directory / run_directory(printed)
    assert run.resolve() == (directory / "artifacts" / "cnn").resolve()
    log = (run / "experiment.log").read_text(encoding="utf-8")
    assert "trains as task='classification'" in log


def check_what_you_write(printed: str, directory: Path) -> None:
    """The LearnerModel form trains 3 epochs, writes the run directory and prints the three
    logged valid losses, falling."""
    values = epoch_values(printed)
    assert len(values) == 3 and values[2] < values[0], printed
    assert (directory / "artifacts" / "run" / "valid" / "epoch-3" / "Loss.log").is_file()


CHECKS: dict[str, Callable[[str, Path], None]] = {
    "### The shortest path": check_the_shortest_path,
    "## What you write": check_what_you_write,
}


def test_every_python_example_is_checked() -> None:
    """Each python block of the README stands under a heading that has a check here, and the
    first one is the shortest path (what a newcomer meets first)."""
    examples = python_examples()
    assert set(examples) == set(CHECKS)
    assert next(iter(examples)) == "### The shortest path"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("heading", sorted(CHECKS))
def test_the_readme_example_runs_as_written(heading: str, tmp_path: Path) -> None:
    """The example under ``heading`` runs as a script and does what the README says."""
    if heading == "### The shortest path":
        pytest.importorskip("sklearn")
    CHECKS[heading](run_example(python_examples()[heading], tmp_path), tmp_path)


@pytest.mark.timeout(480)
def test_the_first_example_runs_twice_in_a_row(tmp_path: Path) -> None:
    """A newcomer runs the first example twice: the second run trains in a fresh directory and
    the first run's files are not touched."""
    pytest.importorskip("sklearn")
    code = python_examples()["### The shortest path"]
    first = run_example(code, tmp_path)
    before = files_in(tmp_path / "artifacts" / "cnn")
    second = run_example(code, tmp_path)
    assert len(epoch_values(second)) == 5
    assert run_directory(first) != run_directory(second)
    assert files_in(tmp_path / "artifacts" / "cnn") == before
