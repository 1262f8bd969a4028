"""The renderer used when none is given: a live display in a Jupyter notebook, the full-screen
TUI on a terminal, else the CLI lines (pipes, files, logs of batch jobs)."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, TextIO

from ember.train._renderer.base import MetricsRenderer
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._renderer.notebook import NotebookMetricsRenderer, in_jupyter_kernel

if TYPE_CHECKING:
    from ember.train._interrupter import Interrupter

__all__ = ["default_renderer"]


_RENDERER_ENV = "EMBER_RENDERER"  # forces a renderer: cli, tui or notebook
_CHOICES = ("", "cli", "tui", "notebook")


def default_renderer(
    interrupter: Interrupter | None = None, stream: TextIO | None = None
) -> MetricsRenderer:
    """The renderer used when none is given.

    In a Jupyter kernel (a notebook), with no ``stream`` given, the
    :class:`~ember.train._renderer.notebook.NotebookMetricsRenderer`: one live display in the
    cell. The full-screen :class:`~ember.train._renderer.tui.TuiMetricsRenderer` when ``stream``
    (default: stdout) and stdin are terminals, ``TERM`` is not ``dumb``, the platform has
    termios (not Windows) and an ``interrupter`` is given (the TUI stops training through it);
    the :class:`CliMetricsRenderer` on ``stream`` otherwise. ``EMBER_RENDERER=cli``, ``tui`` or
    ``notebook`` forces one.
    """
    choice = os.environ.get(_RENDERER_ENV, "").strip().lower()
    if choice not in _CHOICES:
        raise ValueError(
            f"{_RENDERER_ENV} must be 'cli', 'tui' or 'notebook' (or unset), got "
            f"{os.environ[_RENDERER_ENV]!r}"
        )
    if choice == "notebook" or (choice == "" and stream is None and in_jupyter_kernel()):
        return NotebookMetricsRenderer(interrupter)
    stream = stream if stream is not None else sys.stdout
    tui = choice == "tui" or (choice == "" and interrupter is not None and _interactive(stream))
    if not tui:
        return CliMetricsRenderer(stream)
    if interrupter is None:
        raise ValueError(f"{_RENDERER_ENV}=tui needs the run's interrupter, got None")
    # imported here: rich's layout machinery is not needed by `import ember` ("light import")
    from rich.console import Console

    from ember.train._renderer.tui.renderer import TuiMetricsRenderer

    return TuiMetricsRenderer(interrupter, console=Console(file=stream))


def _interactive(stream: TextIO) -> bool:
    """Whether a person watches ``stream`` on a terminal and can type into stdin."""
    if sys.platform == "win32" or os.environ.get("TERM", "") == "dumb":
        return False
    return _isatty(stream) and _isatty(sys.stdin)


def _isatty(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):  # closed, or not a real stream
        return False
