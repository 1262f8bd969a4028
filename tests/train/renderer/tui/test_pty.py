"""End to end in a pseudo-terminal: a real training run picks the TUI, `q` then `s` stops it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

from tests.train.renderer.tui.screen import strip_ansi

SCRIPT = """
import sys

import torch

from ember.data import DataLoaderBuilder, InMemDataset
from ember.app.demo import Mlp, make_samples, sample_batcher
from ember.train import Learner, LossMetric, SupervisedTraining


def loader(count, seed):
    samples = make_samples(count, seed)
    return DataLoaderBuilder(sample_batcher).batch_size(32).build(InMemDataset(samples))


torch.manual_seed(0)
model = Mlp()
result = (
    SupervisedTraining(sys.argv[1], loader(200, 1), loader(64, 2))
    .metric_train_numeric(LossMetric())
    .metric_valid_numeric(LossMetric())
    .num_epochs(100_000)  # long enough that only the keys can end it
    .summary()
    .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
)
print(f"renderer={type(result.renderer).__name__}")
print(f"stop_reason={result.stop_reason}")
print(f"error={result.error!r}")
sys.exit(0 if result.error is None else 1)
"""


class Terminal:
    """The master side of a pty: everything the program wrote, read with deadlines."""

    def __init__(self, master: int, process: subprocess.Popen[bytes]) -> None:
        self.master = master
        self.process = process
        self.output = b""

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return False
        try:
            self.output += os.read(self.master, 1 << 16)
        except OSError:  # EIO: nothing left to read
            return False
        return True

    def wait_for(self, pattern: str, seconds: float) -> None:
        """Read until the output (colours aside) matches the regular expression ``pattern``."""
        deadline = time.monotonic() + seconds
        while not re.search(pattern, self.text()):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (self.process.poll() is not None and not self._read(0)):
                raise AssertionError(f"{pattern!r} not shown; output: {self.text()[-3000:]}")
            self._read(min(remaining, 0.2))

    def wait_exit(self, seconds: float) -> int:
        """Keep reading (the program blocks on a full pty otherwise) until it exits."""
        deadline = time.monotonic() + seconds
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.2):  # what it wrote last
            pass
        code = self.process.poll()
        assert code is not None, f"still running; output: {self.text()[-3000:]}"
        return code

    def text(self) -> str:
        return strip_ansi(self.output.decode("utf-8", "replace"))


def start_in_terminal(script: Path, *args: str) -> tuple[int, int, subprocess.Popen[bytes]]:
    """Run ``script`` with a 120x40 pty as stdin, stdout and stderr; EMBER_RENDERER unset."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("EMBER_RENDERER", "COLUMNS", "LINES", "NO_COLOR")
    }
    env["TERM"] = "xterm-256color"
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env=env,
        cwd=script.parent,
    )
    return master, slave, process


def test_q_then_s_stops_training_and_restores_the_terminal(tmp_path: Path) -> None:
    """On a terminal the TUI is chosen; q, s stops with the reason; the terminal is restored."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    master, slave, process = start_in_terminal(script, str(tmp_path / "run"))
    before = termios.tcgetattr(slave)
    terminal = Terminal(master, process)
    try:
        terminal.wait_for(r"Epochs : ([2-9]|\d\d+)/100000", 120)  # the TUI shows training
        os.write(master, b"q")
        terminal.wait_for(r"\[c\] Cancel\.", 30)  # the Quit popup
        os.write(master, b"s")
        code = terminal.wait_exit(120)
        after = termios.tcgetattr(slave)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
        os.close(slave)

    raw, text = terminal.output, terminal.text()
    assert code == 0, text[-3000:]
    assert after == before  # cbreak mode undone
    enter, leave = raw.index(b"\x1b[?1049h"), raw.rindex(b"\x1b[?1049l")
    assert enter < leave and raw.rindex(b"\x1b[?25h") > enter  # screen left, cursor shown
    printed = strip_ansi(raw[leave:].decode("utf-8", "replace"))
    stopped = r"Training stopped after \d+ of 100000 epochs: Stopping training from user input\."
    assert re.search(stopped, printed)
    assert "Learner Summary" in printed  # close() prints it on the normal screen
    assert "renderer=TuiMetricsRenderer" in printed
    assert "stop_reason=Stopping training from user input." in printed
    assert "error=None" in printed


def test_atexit_restores_the_terminal_when_close_is_never_called(tmp_path: Path) -> None:
    """A program that exits with the TUI still open gets its terminal back from atexit."""
    script = tmp_path / "leave.py"
    script.write_text(
        "import sys\n"
        "from ember.train import Interrupter\n"
        "from ember.train._renderer.tui.renderer import TuiMetricsRenderer\n"
        "TuiMetricsRenderer(Interrupter()).start(1, 1)\n"
        "sys.exit(3)\n"
    )
    master, slave, process = start_in_terminal(script)
    before = termios.tcgetattr(slave)
    terminal = Terminal(master, process)
    try:
        code = terminal.wait_exit(120)
        after = termios.tcgetattr(slave)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
        os.close(slave)
    raw = terminal.output
    assert code == 3, terminal.text()[-3000:]
    assert after == before
    assert raw.index(b"\x1b[?1049h") < raw.rindex(b"\x1b[?1049l")
    assert raw.rindex(b"\x1b[?25h") > raw.index(b"\x1b[?1049h")
