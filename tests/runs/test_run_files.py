"""A shared or downloaded run directory read under guards: each attack a reliability audit made
on one (a log linked to /dev/zero or to a file outside the run, a FIFO, a huge line, nested
JSON, a 240-digit epoch directory, bytes that are not UTF-8) is a RunFileError naming the file
and the problem, through ember.runs and through ``ember summary``, ``plot`` and ``compare``
(exit 2, one line, no traceback)."""

from __future__ import annotations

import json
import os
import shutil
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from ember import EmberError, RunFileError
from ember._rundir.guards import MAX_JSON_DEPTH, MAX_LINE, parse_json
from ember.app.cli import main
from ember.runs import load
from ember.train import Learner, LossMetric
from tests.train.fixtures import TinyRegressor, loader, quiet

pytestmark = pytest.mark.timeout(120)  # a read that hangs fails its test, never the suite

Attack = Callable[[Path, Path], tuple[Path, str]]
"""Damages the run (in a directory of its own) and says the file to name and the problem."""


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run of 3 epochs with Loss on both splits and checkpoints, no summary.json (so that
    ``ember summary`` reads the logs)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    torch.manual_seed(0)
    model = TinyRegressor()
    quiet(run, loader(8, 4), loader(4, 4)).metrics(LossMetric()).num_epochs(
        3
    ).with_default_checkpointers().launch(Learner(model, torch.optim.SGD(model.parameters())))
    return run


def _linked_to_dev_zero(run: Path, outside: Path) -> tuple[Path, str]:
    log = run / "train" / "epoch-1" / "Loss.log"
    log.unlink()
    log.symlink_to("/dev/zero")
    return log, f"it leads to /dev/zero, outside the run directory {run.resolve()}"


def _fifo(run: Path, outside: Path) -> tuple[Path, str]:
    log = run / "valid" / "epoch-1" / "Loss.log"
    log.unlink()
    os.mkfifo(log)  # nobody writes it: an open for reading would wait forever
    return log, "it is not a regular file (a FIFO, a device or a directory)"


def _huge_line(run: Path, outside: Path) -> tuple[Path, str]:
    log = run / "train" / "epoch-2" / "Loss.log"
    log.write_bytes(b"0.5,1\n1." + b"5" * MAX_LINE + b",1\n")
    return log, f"line 2 is longer than {MAX_LINE} bytes"


def _nested_config(run: Path, outside: Path) -> tuple[Path, str]:
    path = run / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)  # json.loads: RecursionError
    return path, f"its JSON is nested more than {MAX_JSON_DEPTH} levels deep"


def _nested_summary(run: Path, outside: Path) -> tuple[Path, str]:
    path = run / "summary.json"  # parses, but deeper than anything walking it can follow
    path.write_text(json.dumps({"epochs": 3, "metrics": [json.loads("[" * 500 + "]" * 500)]}))
    return path, f"its JSON is nested more than {MAX_JSON_DEPTH} levels deep"


def _huge_epoch(run: Path, outside: Path) -> tuple[Path, str]:
    directory = run / "valid" / f"epoch-{'9' * 240}"
    shutil.copytree(run / "valid" / "epoch-1", directory)
    return directory, "its epoch number 99999999999999999999... is more than 2147483647"


def _linked_outside(run: Path, outside: Path) -> tuple[Path, str]:
    secret = outside / "secret.txt"
    secret.write_text("SECRET_TOKEN=hunter2\n")
    log = run / "train" / "epoch-3" / "Loss.log"
    log.unlink()
    log.symlink_to(secret)
    return log, f"it leads to {secret}, outside the run directory {run.resolve()}"


def _not_utf8(run: Path, outside: Path) -> tuple[Path, str]:
    log = run / "train" / "epoch-1" / "Loss.log"
    log.write_bytes(b"0.5,1\n\xff\xfe,1\n")
    return log, "line 2 is not UTF-8 text (invalid start byte at byte 6)"


ATTACKS = {
    "a log linked to /dev/zero": _linked_to_dev_zero,
    "a FIFO": _fifo,
    "a line longer than MAX_LINE": _huge_line,
    "a nested config.json": _nested_config,
    "a nested summary.json": _nested_summary,
    "a 240-digit epoch directory": _huge_epoch,
    "a log linked to a file outside the run": _linked_outside,
    "a log that is not UTF-8": _not_utf8,
}


@pytest.fixture(params=list(ATTACKS))
def attacked(request: pytest.FixtureRequest, trained: Path, tmp_path: Path) -> tuple[Path, str]:
    """A copy of the trained run with one attack made on it: the run, and the message."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    path, problem = ATTACKS[request.param](run, tmp_path)
    return run, f"the run file {path} cannot be read: {problem}"


def test_each_attack_is_refused_by_ember_runs_naming_the_file(attacked: tuple[Path, str]) -> None:
    """Loading the run and reading its values raises RunFileError (an EmberError and, as
    before, a ValueError) with the file and the problem; nothing hangs, nothing leaks."""
    run, message = attacked
    with pytest.raises(RunFileError) as raised:
        load(run).rows("item")
    assert str(raised.value) == message
    assert isinstance(raised.value, EmberError) and isinstance(raised.value, ValueError)
    assert "SECRET_TOKEN" not in str(raised.value)


@pytest.mark.parametrize("command", ["summary", "compare", "plot"])
def test_each_attack_exits_2_with_one_line_naming_the_file(
    attacked: tuple[Path, str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``ember summary|compare|plot RUN`` on an attacked run: exit 2, one line naming the file
    and the problem, no traceback."""
    run, message = attacked
    assert main([command, str(run)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"ember {command}: {message}\n"
    assert captured.out == ""


def test_a_huge_line_costs_no_more_memory_than_the_line_limit(tmp_path: Path) -> None:
    """A 32 MiB line (the audit's 1 GiB line, smaller) is refused having held at most about a
    line limit of it, not the whole line twice over."""
    log = tmp_path / "train" / "epoch-1" / "Loss.log"
    log.parent.mkdir(parents=True)
    with log.open("wb") as file:
        file.write(b"1")
        for _ in range(32):
            file.write(b"5" * (1 << 20))
    tracemalloc.start()
    try:
        with pytest.raises(RunFileError, match=f"line 1 is longer than {MAX_LINE} bytes"):
            load(tmp_path).rows()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE


@pytest.mark.parametrize("depth", [1, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
def test_json_as_deep_as_the_limit_is_read(depth: int) -> None:
    """Objects and lists nested up to the limit read back as they are."""
    document: object = {"lr": 0.1}
    for level in range(depth - 1):
        document = [document] if level % 2 else {"inner": document}
    assert parse_json(json.dumps(document).encode(), Path("config.json")) == document


def test_links_inside_the_run_are_followed(trained: Path, tmp_path: Path) -> None:
    """A run directory reached through a link, and a log linked to another file of the run,
    read as before: only what leads outside is refused."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    log = run / "train" / "epoch-3" / "Loss.log"
    log.unlink()
    log.symlink_to(run / "train" / "epoch-2" / "Loss.log")
    (tmp_path / "latest").symlink_to(run)
    values = load(tmp_path / "latest").values("train", "Loss")
    assert values[3] == values[2]
