"""The metric files' writer process: blocks in order, errors raised once with their errno and
path, the signals that stop training ignored, nothing lost when the training process dies, and
the thread it falls back to where no process can be started."""

from __future__ import annotations

import ast
import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from ember.train._logger import blocks
from ember.train._logger.metric_writer import MetricFileWriter
from tests.train.fixtures import metric_writer_processes


def test_blocks_are_written_in_order_and_the_process_ends_with_close(tmp_path: Path) -> None:
    writer = MetricFileWriter()
    log = tmp_path / "train" / "epoch-1" / "Loss.log"  # neither directory exists yet
    writer.write([(str(log), "1.0,32\n", True)])
    writer.write([(str(log), "0.5,32\n", False), (str(tmp_path / "steps.jsonl"), "[1,1]\n", False)])
    writer.flush()
    assert log.read_text() == "1.0,32\n0.5,32\n"
    assert (tmp_path / "steps.jsonl").read_text() == "[1,1]\n"
    assert len(metric_writer_processes()) == 1
    writer.write([(str(log), "0.2,final\n", True)])  # a file started anew
    writer.close()
    assert log.read_text() == "0.2,final\n"
    assert metric_writer_processes() == []
    writer.close()  # idempotent


def test_a_failed_write_is_raised_once_with_its_errno_and_path_and_later_blocks_are_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "train").write_text("a file where the split's directory belongs")
    blocked = tmp_path / "train" / "epoch-1" / "Loss.log"
    fine = tmp_path / "valid" / "epoch-1" / "Loss.log"
    writer = MetricFileWriter()
    writer.write([(str(blocked), "1.0,1\n", True), (str(fine), "2.0,1\n", True)])
    writer.write([(str(blocked), "3.0,1\n", True)])
    with pytest.raises(NotADirectoryError) as raised:
        writer.flush()
    assert raised.value.errno == errno.ENOTDIR
    assert str(tmp_path / "train") in str(raised.value)
    assert "a later metric file write failed too" in " ".join(raised.value.__notes__)
    assert fine.read_text() == "2.0,1\n"
    writer.raise_pending()  # raised once: nothing pending now
    writer.close()


def test_an_error_is_raised_by_the_next_call_without_waiting_for_a_sync(tmp_path: Path) -> None:
    (tmp_path / "train").write_text("not a directory")
    writer = MetricFileWriter()
    writer.write([(str(tmp_path / "train" / "epoch-1" / "Loss.log"), "1.0,1\n", True)])
    with pytest.raises(NotADirectoryError):
        _raised_without_a_sync(writer)
    writer.close()


def _raised_without_a_sync(writer: MetricFileWriter) -> None:
    """Call ``raise_pending`` until it raises (the child reports as soon as it fails)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        writer.raise_pending()


def test_the_signals_that_stop_training_leave_the_writer_writing(tmp_path: Path) -> None:
    writer = MetricFileWriter()
    log = tmp_path / "Loss.log"
    writer.write([(str(log), "1\n", True)])
    writer.flush()
    (pid,) = metric_writer_processes()
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        os.kill(pid, number)
    writer.write([(str(log), "2\n", False)])
    writer.flush()
    assert log.read_text() == "1\n2\n"
    writer.close()


def test_a_writer_process_that_died_is_named_with_its_exit_code(tmp_path: Path) -> None:
    writer = MetricFileWriter()
    writer.write([(str(tmp_path / "Loss.log"), "1\n", True)])
    writer.flush()
    (pid,) = metric_writer_processes()
    os.kill(pid, signal.SIGKILL)
    message = rf"metric-writer process \(pid {pid}\) ended with exit code -9"
    with pytest.raises(RuntimeError, match=message):  # at the write, or at the sync after it
        _write_and_flush(writer, [(str(tmp_path / "Loss.log"), "2\n", False)])
    writer.close()


def _write_and_flush(writer: MetricFileWriter, blocks: list[tuple[str, str, bool]]) -> None:
    writer.write(blocks)
    writer.flush()


def test_what_left_a_training_process_that_died_is_still_written(tmp_path: Path) -> None:
    """The training process ends without closing its writer (os._exit, as at a crash): the
    child writes every block it was handed, then ends with its input."""
    log = tmp_path / "Loss.log"
    script = textwrap.dedent(
        f"""
        import os
        from ember.train._logger.metric_writer import MetricFileWriter
        writer = MetricFileWriter()
        for i in range(200):
            writer.write([({str(log)!r}, f"{{i}}\\n", i == 0)])
        os._exit(0)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], check=False, timeout=60)
    assert done.returncode == 0
    deadline = time.monotonic() + 30  # the orphaned child finishes on its own time
    expected = "".join(f"{i}\n" for i in range(200))
    while _text(log) != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _text(log) == expected


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


@pytest.mark.parametrize("where", ["an embedded interpreter", "a frozen application"])
def test_without_a_process_the_blocks_go_to_a_thread_with_the_same_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "an embedded interpreter":
        monkeypatch.setattr(sys, "executable", "")  # nothing to start
    else:  # sys.executable is the application, which would not run blocks.py
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    (tmp_path / "train").write_text("not a directory")
    writer = MetricFileWriter()
    log = tmp_path / "valid" / "Loss.log"
    writer.write([(str(log), "1\n", True), (str(tmp_path / "train" / "x" / "Loss.log"), "", True)])
    writer.write([(str(log), "2\n", False)])
    assert "metric-writer" in [thread.name for thread in threading.enumerate()]
    assert metric_writer_processes() == []
    with pytest.raises(NotADirectoryError):
        writer.flush()
    assert log.read_text() == "1\n2\n"
    writer.close()
    assert "metric-writer" not in [thread.name for thread in threading.enumerate()]


def test_the_writer_program_imports_only_what_starts_fast() -> None:
    """The child starts with every run, on a core training may need: it imports four standard
    modules (``json``, ``subprocess`` or ``typing`` would triple its start-up)."""
    tree = ast.parse(Path(blocks.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported == {"__future__", "os", "signal", "struct", "sys"}
