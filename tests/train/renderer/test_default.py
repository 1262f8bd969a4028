"""default_renderer: the TUI for a person at a terminal, the live display in a notebook, the CLI
renderer otherwise."""

from __future__ import annotations

import io
import os
import pty
import sys
from collections.abc import Iterator
from typing import TextIO

import pytest

from ember.train import CliMetricsRenderer, Interrupter, default_renderer
from ember.train._renderer.notebook import NotebookMetricsRenderer, in_jupyter_kernel
from ember.train._renderer.tui.renderer import TuiMetricsRenderer


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[TextIO]:
    """A pty as stdout-like stream and as stdin, TERM set, EMBER_RENDERER unset."""
    master, slave = pty.openpty()
    stream = os.fdopen(slave, "w")
    monkeypatch.setattr(sys, "stdin", stream)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("EMBER_RENDERER", raising=False)
    yield stream
    stream.close()
    os.close(master)


def test_a_terminal_gets_the_tui(terminal: TextIO) -> None:
    """stdout and stdin are terminals: the TUI, stopping through the given interrupter."""
    assert isinstance(default_renderer(Interrupter(), terminal), TuiMetricsRenderer)


def test_a_pipe_a_dumb_terminal_or_no_interrupter_get_the_cli(
    terminal: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a terminal, TERM=dumb, stdin not a terminal, or no interrupter: the CLI renderer."""
    stream = io.StringIO()
    renderer = default_renderer(Interrupter(), stream)
    assert isinstance(renderer, CliMetricsRenderer) and renderer.stream is stream
    assert isinstance(default_renderer(None, terminal), CliMetricsRenderer)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(default_renderer(Interrupter(), terminal), CliMetricsRenderer)
    monkeypatch.setenv("TERM", "xterm")
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    assert isinstance(default_renderer(Interrupter(), terminal), CliMetricsRenderer)


def test_ember_renderer_forces_a_renderer(
    terminal: TextIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    """EMBER_RENDERER=cli or tui wins over the terminal check (case and spaces ignored)."""
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    assert isinstance(default_renderer(Interrupter(), terminal), CliMetricsRenderer)
    monkeypatch.setenv("EMBER_RENDERER", " TUI ")
    assert isinstance(default_renderer(Interrupter(), io.StringIO()), TuiMetricsRenderer)
    with pytest.raises(ValueError, match="EMBER_RENDERER=tui needs the run's interrupter"):
        default_renderer(None, io.StringIO())
    monkeypatch.setenv("EMBER_RENDERER", "gui")
    with pytest.raises(
        ValueError, match=r"EMBER_RENDERER must be 'cli', 'tui' or 'notebook'.*'gui'"
    ):
        default_renderer(Interrupter(), io.StringIO())
    monkeypatch.setenv("EMBER_RENDERER", "notebook")
    assert isinstance(default_renderer(Interrupter(), terminal), NotebookMetricsRenderer)


def test_outside_a_jupyter_kernel_no_notebook_display_is_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Plain Python, or IPython in a terminal (no kernel): not the notebook's display. (In a
    kernel it is: tests/train/test_notebook.py runs one.)"""
    monkeypatch.delenv("EMBER_RENDERER", raising=False)
    assert not in_jupyter_kernel()
    assert isinstance(default_renderer(Interrupter()), CliMetricsRenderer)
