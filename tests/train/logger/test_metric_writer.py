"""The metric files' writer process: blocks in order, errors raised once with their errno and
path, the signals that stop training ignored, nothing lost when the training process dies, and
the thread it falls back to where no process can be started."""

from __future__ import annotations

import ast
import errno
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ember.train import FileMetricLogger
from ember.train._logger import blocks
from ember.train._logger.metric_writer import MetricFileWriter
from tests.train.fixtures import metric_writer_processes


def test_blocks_are_written_in_order_and_the_process_ends_with_close(tmp_path: Path) -> None:
    writer = MetricFileWriter(str(tmp_path))
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
    writer = MetricFileWriter(str(tmp_path))
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
    writer = MetricFileWriter(str(tmp_path))
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
    writer = MetricFileWriter(str(tmp_path))
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
    writer = MetricFileWriter(str(tmp_path))
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
        writer = MetricFileWriter({str(tmp_path)!r})
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
    writer = MetricFileWriter(str(tmp_path))
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


@pytest.fixture
def no_writer_left() -> Iterator[list[int]]:
    """The pids a test stopped: each one still running at the end is killed (never left
    stopped), then no metric-writer process may remain."""
    stopped: list[int] = []
    yield stopped
    for pid in stopped:
        if pid in metric_writer_processes():
            os.kill(pid, signal.SIGKILL)
    assert metric_writer_processes() == []


def _stopped_writer(writer: MetricFileWriter, path: Path, stopped: list[int]) -> int:
    """Start ``writer``'s process and stop it (SIGSTOP); its pid."""
    writer.write([(str(path), "1\n", True)])
    writer.flush()
    (pid,) = metric_writer_processes()
    os.kill(pid, signal.SIGSTOP)
    stopped.append(pid)
    return pid


def test_a_stopped_writer_is_named_at_a_flush_killed_and_replaced(
    tmp_path: Path, no_writer_left: list[int]
) -> None:
    """A stopped writer (as a hung NFS mount leaves it) does not answer a sync: the flush raises
    within the timeout naming its pid and what it was asked, the process is killed, and a later
    block starts a new writer, as after a writer that died."""
    writer = MetricFileWriter(str(tmp_path), timeout=0.5)
    log = tmp_path / "Loss.log"
    pid = _stopped_writer(writer, log, no_writer_left)
    writer.write([(str(log), "2\n", False), (str(log), "3\n", False)])
    started = time.monotonic()
    with pytest.raises(TimeoutError) as raised:
        writer.flush()
    assert time.monotonic() - started < 10  # the bound (0.5 s), the kill and a busy machine
    message = str(raised.value)
    assert f"metric-writer process (pid {pid}) was asked for a flush of 2 block(s)" in message
    assert "not answered within 0.5 s: it was killed" in message
    assert f"writing the metric logs under {tmp_path}" in message
    assert metric_writer_processes() == []
    writer.write([(str(log), "4\n", False)])
    writer.close()
    assert log.read_text() == "1\n4\n"  # the lines the stopped writer held are lost, named


def test_a_write_into_the_full_pipe_of_a_stopped_writer_is_bounded(
    tmp_path: Path, no_writer_left: list[int]
) -> None:
    """Training hands a stopped writer more than its pipe holds: the write waits at most the
    timeout, then names the writer and what it was handed."""
    writer = MetricFileWriter(str(tmp_path), timeout=0.5)
    pid = _stopped_writer(writer, tmp_path / "Loss.log", no_writer_left)
    text = "0.5,32\n" * (1 << 20)  # 7 MiB: more than any pipe holds
    with pytest.raises(TimeoutError, match=rf"\(pid {pid}\) was asked to take 1 block\(s\)"):
        writer.write([(str(tmp_path / "Loss.log"), text, False)])
    assert metric_writer_processes() == []
    writer.close()


@pytest.mark.parametrize("where", ["process", "thread"])
def test_a_writer_blocked_in_a_file_system_call_is_named_at_the_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A metric file that blocks its writer (a FIFO no one reads, as a hung mount blocks an
    open) is named at the flush, within the timeout: the process killed, the thread (which
    cannot be killed) left behind until the file lets it go."""
    if where == "thread":
        monkeypatch.setattr(sys, "executable", "")  # no process can be started
    fifo = tmp_path / "Loss.log"
    os.mkfifo(fifo)
    writer = MetricFileWriter(str(tmp_path), timeout=0.5)
    writer.write([(str(fifo), "1\n", False)])
    with pytest.raises(TimeoutError, match=f"the metric-writer {where}.* was asked for a flush"):
        writer.flush()
    assert metric_writer_processes() == []
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # let a thread left behind go on
    try:
        for thread in threading.enumerate():
            if thread.name == "metric-writer":
                thread.join(timeout=30)
        assert "metric-writer" not in [thread.name for thread in threading.enumerate()]
    finally:
        os.close(reader)
    writer.close()


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("where", ["process", "thread"])
def test_a_full_disk_is_named_with_its_file_and_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A write that finds the disk full (``/dev/full`` behind the metric file: a real ENOSPC
    from the writer's write) is raised with its errno, the file and the directory written."""
    if where == "thread":
        monkeypatch.setattr(sys, "executable", "")
    log = tmp_path / "train" / "epoch-1" / "Loss.log"
    log.parent.mkdir(parents=True)
    log.symlink_to("/dev/full")
    writer = MetricFileWriter(str(tmp_path))
    writer.write([(str(log), "1.0,32\n", True)])
    with pytest.raises(OSError, match="No space left on device") as raised:
        writer.flush()
    assert raised.value.errno == errno.ENOSPC
    assert raised.value.filename == str(log)
    assert str(raised.value) == (
        f"[Errno {errno.ENOSPC}] No space left on device, writing the metric logs under "
        f"{tmp_path}: '{log}'"
    )
    writer.close()


@pytest.mark.parametrize("timeout", [0, -1.0, math.inf, 1e7])
def test_a_writer_timeout_out_of_range_is_refused_naming_it(tmp_path: Path, timeout: float) -> None:
    """The timeout is a number of seconds > 0 that poll() can wait (at most 10**6)."""
    with pytest.raises(ValueError, match="writer_timeout must be"):
        FileMetricLogger(tmp_path, writer_timeout=timeout)
