"""A full-screen renderer for terminals (Burn's layout), drawn with rich on the alternate screen.

Panes: Controls, Metrics (each metric's text per split), Status (mode, epochs, items,
iteration, items/s, ETA), Plots (live braille plots of the numeric metrics) and Progress (the split
and the whole run, with an ETA). Keys: ``q`` opens the Quit popup (``s`` stops training
through the interrupter, ``c``/Esc cancels), ←/→ switch the plotted metric, ↑/↓ the plot kind.
Ctrl-C keeps working (cbreak mode, not raw): during ``launch`` the first one stops gracefully,
a second one aborts ("graceful stop"). There is no "kill" key: it would only be another Ctrl-C.

An evaluation (``EvaluatorBuilder(...).renderer(tui)``) is Burn's ``Evaluation`` mode: the
Status pane shows ``Mode : Evaluation`` and counts tests, the test values are drawn in green
(``Test``); an evaluation cannot be stopped from the keyboard except by Ctrl-C.

Threads: the protocol methods (``tui/base.py``, shared with the notebook's renderer) run on
``train-worker``, or on the training thread in a run on the CPU (``on_error`` and ``close`` on
the caller's thread), and only update state under a lock, never formatting text. A thread named
``train-renderer`` reads keys and draws, at most ``max_refresh_per_second`` times a second;
metric entries are formatted only there.

The terminal is always given back: ``close()``, ``on_error()``, a failure while drawing and an
``atexit`` hook all leave the alternate screen, show the cursor and restore the terminal mode
(saved before cbreak mode was set). The summary and errors are printed after that, on the normal
screen, so they stay visible.

This module holds the renderer itself: the keys, the ``train-renderer`` thread and the
terminal; the protocol methods and the lock are in :mod:`~ember.train._renderer.tui.base`.
What is shown is in :mod:`~ember.train._renderer.tui.state`, how it is drawn in
:mod:`~ember.train._renderer.tui.panes`, how keys are read in
:mod:`~ember.train._renderer.tui.keys`.
"""

from __future__ import annotations

import atexit
import logging
import math
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from ember.train._renderer.plot_data import PlotKind
from ember.train._renderer.tui.base import StateRenderer
from ember.train._renderer.tui.keys import KeyReader, decode_keys, input_fd
from ember.train._renderer.tui.state import format_eta

if TYPE_CHECKING:
    from rich.console import Console
    from rich.live import Live

    from ember.train._interrupter import Interrupter

__all__ = ["STOP_REASON", "TuiMetricsRenderer", "decode_keys", "format_eta"]

log = logging.getLogger("ember.train")

STOP_REASON = "Stopping training from user input."
"""The interrupter's reason when the person confirms the Quit popup with ``s``."""

_IDLE_REDRAW = 1.0  # seconds: redraw without news so that items/s and the ETA move on


class TuiMetricsRenderer(StateRenderer):
    """The full-screen renderer; stops training through ``interrupter`` when asked to.

    ``console`` (default: a rich console on stdout), ``input_stream`` (where keys are read: a
    file object or descriptor; default stdin, if it is a terminal) and ``clock`` are injectable
    for tests. With
    ``threaded=False`` no ``train-renderer`` thread is started: call :meth:`poll` to read keys
    and draw (tests, or an application that runs its own loop).
    """

    def __init__(
        self,
        interrupter: Interrupter,
        *,
        console: Console | None = None,
        input_stream: TextIO | int | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_refresh_per_second: float = 10,
        threaded: bool = True,
    ) -> None:
        if not max_refresh_per_second > 0:
            raise ValueError(f"max_refresh_per_second must be > 0, got {max_refresh_per_second}")
        super().__init__(interrupter, clock)
        if console is None:
            # imported here, as below: rich's layout machinery is not needed by `import ember`
            from rich.console import Console

            console = Console()
        self._console = console
        self._input = input_stream
        self._interval = 1.0 / max_refresh_per_second
        self._threaded = threaded
        self._popup = False
        self._kind = PlotKind.FULL
        self._selected = 0
        self._draw_lock = threading.RLock()  # the terminal: drawing, entering, leaving
        self._live: Live | None = None
        self._reader: KeyReader | None = None
        self._thread: threading.Thread | None = None
        self._stop_thread = threading.Event()
        self._last_draw = -math.inf

    # keys and drawing ------------------------------------------------------------------------

    def handle_key(self, key: str) -> None:
        """React to a key named as ``decode_keys`` names it."""
        stop = False
        with self._lock:
            if self._popup:
                if key not in ("s", "c", "escape"):
                    return
                self._popup = False
                stop = key == "s"
            elif key == "q":
                self._popup = True
            elif key in ("left", "right"):
                count = len(self._state.plots)
                step = 1 if key == "right" else -1
                self._selected = (self._selected + step) % count if count else 0
            elif key in ("up", "down"):
                self._kind = self._kind.previous() if key == "up" else self._kind.next()
            else:
                return
            self._dirty = True
        if stop:  # the run ends as for any interrupt: after the step, checkpoints as usual
            self._interrupter.stop(STOP_REASON)

    def refresh(self) -> bool:
        """Draw if something changed and the rate limit allows; True if a frame was drawn."""
        with self._draw_lock:
            live = self._live
            if live is None:
                return False
            now = self._clock()
            since = now - self._last_draw + 1e-9  # a frame due now is not skipped for rounding
            if since < self._interval or (not self._dirty and since < _IDLE_REDRAW):
                return False
            stopping = self._interrupter.message if self._interrupter.should_stop() else None
            with self._lock:
                frame = self._state.frame(now, self._kind, self._selected, self._popup, stopping)
                self._dirty = False
            self._last_draw = now
            from ember.train._renderer.tui.panes import render_frame

            live.update(render_frame(frame), refresh=True)  # rendered outside the state lock
            return True

    def poll(self) -> None:
        """Handle the keys pressed so far and draw if due (without waiting)."""
        try:
            self._tick(0.0)
        except Exception as error:
            self._fail(error)

    def _tick(self, timeout: float) -> None:
        reader = self._reader
        if reader is not None and reader.active:
            keys = reader.read(timeout)
        else:
            keys = []
            if timeout:
                self._stop_thread.wait(timeout)
        for key in keys:
            self.handle_key(key)
        self.refresh()

    def _run(self) -> None:
        try:
            while not self._stop_thread.is_set():
                self._tick(self._interval)
        except Exception as error:
            self._fail(error)

    def _fail(self, error: Exception) -> None:
        log.error("the terminal UI failed", exc_info=error)
        self._restore()
        text = "".join(traceback.format_exception(error)).rstrip()
        self._print(f"The terminal UI failed and was closed; training goes on.\n{text}")

    # the terminal ----------------------------------------------------------------------------

    def _open(self) -> None:
        with self._draw_lock:
            if self._live is not None:
                return
            self._stop_thread.clear()
            self._last_draw = -math.inf
            from rich.live import Live

            self._live = Live(
                console=self._console,
                screen=True,
                auto_refresh=False,  # we draw, rate-limited, on train-renderer
                redirect_stdout=False,  # leave sys.stdout alone: other threads print too
                redirect_stderr=False,
            )
            self._reader = KeyReader(input_fd(self._input))
            atexit.register(self._restore)  # also if close() is never reached
            try:
                self._live.start()
                self._reader.enter()
            except BaseException:
                self._restore()
                raise
            if self._threaded:
                self._thread = threading.Thread(
                    target=self._run, name="train-renderer", daemon=True
                )
                self._thread.start()

    def _restore(self) -> None:
        """Stop drawing, leave the alternate screen, show the cursor, restore the terminal mode."""
        self._stop_thread.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        with self._draw_lock:
            self._thread = None
            live, reader = self._live, self._reader
            self._live = self._reader = None
            atexit.unregister(self._restore)
            try:
                if live is not None:
                    live.stop()
            finally:
                if reader is not None:
                    reader.restore()

    def _print(self, text: str) -> None:
        self._console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)
