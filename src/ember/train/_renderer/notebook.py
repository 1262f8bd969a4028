"""A renderer for Jupyter notebooks: one live display in the cell, updated in place.

A notebook cell has no terminal: the full-screen TUI cannot run there, and the CLI renderer's
lines pile up (31 lines for one epoch). This renderer shows the TUI's panes (Metrics, Status,
Plots, Progress; not Controls, as no key is read) as one display output of the cell, drawn by
rich as HTML (and as text for a plain-text view), and replaces it in place through IPython's
display handle (``update_display_data``) at most ``max_refresh_per_second`` times a second and at
every start and end. A saved notebook keeps the last frame, not one per update. How training
ended and the summary are printed under it at the end, as the TUI prints them.

``default_renderer`` picks it in a Jupyter kernel (``EMBER_RENDERER=notebook`` forces it).

No thread: a frame is drawn by the protocol method that changed the state, on the thread that
calls it (``train-worker``, or the training thread in a run on the CPU), which ipykernel routes to
the running cell. The kernel's interrupt (the stop button) is a SIGINT: the first stops training
gracefully after the step (``graceful_stop``), as Ctrl-C does in a terminal. A display that
fails is closed with a message and training goes on.
"""

from __future__ import annotations

import io
import logging
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from ember.train._interrupter import Interrupter
from ember.train._renderer.plot_data import PlotKind
from ember.train._renderer.tui.base import StateRenderer
from ember.train._renderer.tui.state import Frame

__all__ = ["NotebookMetricsRenderer", "in_jupyter_kernel"]

log = logging.getLogger("ember.train")

# rich's own notebook markup: a block that keeps the box drawing aligned and scrolls if too wide
_HTML = (
    '<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
    "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">{code}</pre>"
)

Display = Callable[..., Any]
"""IPython's ``display``: ``display(bundle, raw=True, display_id=True)`` shows a MIME bundle
and returns a handle whose ``update(bundle, raw=True)`` replaces it."""


def in_jupyter_kernel() -> bool:
    """Whether this process is a Jupyter kernel (a notebook, JupyterLab, VS Code, Colab), read
    from IPython if it is already imported (it never is imported here)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


class NotebookMetricsRenderer(StateRenderer):
    """One live display of training in a Jupyter notebook cell, updated in place.

    The TUI's panes without its keys, redrawn at most ``max_refresh_per_second`` times a second
    (see the module doc).

    ``interrupter``: the run's, to show a stop and its reason (``default_renderer`` gives it).
    ``width``: the display's width in characters. ``display`` (IPython's, by default),
    ``stream`` (where the closing lines go: the current ``sys.stdout``) and ``clock`` are
    injectable for tests.
    """

    def __init__(
        self,
        interrupter: Interrupter | None = None,
        *,
        width: int = 120,
        max_refresh_per_second: float = 2,
        display: Display | None = None,
        stream: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not max_refresh_per_second > 0:
            raise ValueError(f"max_refresh_per_second must be > 0, got {max_refresh_per_second}")
        if not isinstance(width, int) or width < 60:
            raise ValueError(f"width must be an int of at least 60 characters, got {width!r}")
        super().__init__(interrupter if interrupter is not None else Interrupter(), clock)
        self._width = width
        self._interval = 1.0 / max_refresh_per_second
        self._display = display
        self._stream = stream
        self._draw_lock = threading.Lock()  # one frame at a time, and the handle
        self._showing = False
        self._handle: Any = None
        self._last_draw = -math.inf

    def _open(self) -> None:
        with self._draw_lock:
            self._showing, self._handle, self._last_draw = True, None, -math.inf
        self._draw(force=True)

    def _changed(self) -> None:
        self._draw(force=False)

    def _restore(self) -> None:
        self._draw(force=True)  # the last frame stays in the cell
        with self._draw_lock:
            self._showing = False

    def _print(self, text: str) -> None:
        stream = self._stream if self._stream is not None else sys.stdout
        stream.write(text + "\n")
        stream.flush()

    def on_warning(self, message: str) -> None:
        """Print the warning under the display (an optional renderer member)."""
        self._print(f"Warning: {message}")

    def _draw(self, *, force: bool) -> None:
        """Draw a frame if one is due (always with ``force``) while the display is shown."""
        with self._draw_lock:
            now = self._clock()
            due = force or now - self._last_draw + 1e-9 >= self._interval
            if not self._showing or not due:
                return
            stopping = self._interrupter.message if self._interrupter.should_stop() else None
            with self._lock:
                frame = self._state.frame(now, PlotKind.FULL, 0, False, stopping)
                self._dirty = False
            self._last_draw = now
            try:
                self._show(mime_bundle(frame, self._width))
            except Exception as error:  # training goes on without the display
                self._showing = False
                log.error("the notebook display failed", exc_info=error)
                text = "".join(traceback.format_exception(error)).rstrip()
                self._print(
                    f"The notebook display failed and was closed; training goes on.\n{text}"
                )

    def _show(self, bundle: dict[str, str]) -> None:
        if self._handle is not None:
            self._handle.update(bundle, raw=True)
            return
        display: Display
        if self._display is not None:
            display = self._display
        else:  # a notebook has IPython; ember imports it only here
            from IPython.display import display as ipython_display

            display = ipython_display
        self._handle = display(bundle, raw=True, display_id=True)


def mime_bundle(frame: Frame, width: int) -> dict[str, str]:
    """``frame`` drawn by rich as the TUI's panes without Controls: HTML and plain text."""
    from rich.console import Console

    from ember.train._renderer.tui.panes import frame_height, render_frame

    console = Console(
        file=io.StringIO(),
        record=True,
        width=width,
        height=frame_height(frame),
        force_terminal=True,
        force_jupyter=False,  # rich's own notebook output would print, not update in place
        color_system="truecolor",
    )
    console.print(render_frame(frame, keys=False))
    html = console.export_html(inline_styles=True, code_format=_HTML, clear=False)
    return {"text/plain": console.export_text(), "text/html": html}
