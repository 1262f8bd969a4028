"""A TUI on an in-memory terminal for tests: a fake clock, keys through a pipe, frames as text."""

from __future__ import annotations

import io
import os
import re
import time

from rich.console import Console

from ember.train import Interrupter
from ember.train._renderer.tui.renderer import TuiMetricsRenderer

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HOME = "\x1b[H"  # rich's Live writes it before every frame on the alternate screen
ENTER = "\x1b[?1049h"  # enter the alternate screen
PIPE = -2  # Screen's default input: a pipe that press() and type() write to


class FakeClock:
    """A clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Screen:
    """A TUI on a 120x40 in-memory terminal, keys fed through a pipe, driven by ``poll()``.

    ``input_stream`` replaces the pipe (None: the renderer's default, stdin). With
    ``threaded=True`` its own thread draws on the real clock instead.
    """

    def __init__(
        self, *, input_stream: int | None = PIPE, threaded: bool = False, **options: float
    ) -> None:
        self.clock = FakeClock()
        self.interrupter = Interrupter()
        self.output = io.StringIO()
        console = Console(file=self.output, force_terminal=True, width=120, height=40)
        self._read, self._write = os.pipe()
        self.tui = TuiMetricsRenderer(
            self.interrupter,
            console=console,
            input_stream=self._read if input_stream == PIPE else input_stream,
            clock=self.clock if not threaded else time.monotonic,
            threaded=threaded,
            **options,
        )

    def type(self, keys: bytes) -> None:
        """Type ``keys``."""
        os.write(self._write, keys)

    def press(self, keys: bytes) -> None:
        """Type ``keys`` and let the renderer handle them (drawing if due)."""
        self.type(keys)
        self.tui.poll()

    @property
    def raw(self) -> str:
        return self.output.getvalue()

    @property
    def draws(self) -> int:
        raw = self.raw
        return raw.count(HOME) - raw.count(ENTER + HOME)  # entering the screen also homes

    def frame(self) -> str:
        """The last frame drawn, without colours."""
        frames = self.raw.split(HOME)
        assert len(frames) > 1, "nothing was drawn"
        return _ANSI.sub("", frames[-1])

    def after_exit(self) -> str:
        """What was printed after leaving the alternate screen."""
        raw = self.raw
        assert "\x1b[?1049l" in raw, "the alternate screen was not left"
        return _ANSI.sub("", raw.rsplit("\x1b[?1049l", 1)[1])

    def close_pipe(self) -> None:
        os.close(self._read)
        os.close(self._write)


def strip_ansi(text: str) -> str:
    """``text`` without colour and cursor sequences."""
    return _ANSI.sub("", text)
