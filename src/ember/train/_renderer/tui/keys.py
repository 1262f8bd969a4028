"""Terminal input for the TUI: decoding key presses and reading them in cbreak mode.

Kept apart from drawing so that the byte-level protocol (arrow escape sequences, a lone Esc
split across reads) is testable without a terminal or rich: :func:`decode_keys` is pure, and
:class:`KeyReader` only adds the descriptor, ``select`` and the termios mode around it.
"""

from __future__ import annotations

import os
import select
import sys
from typing import Any, TextIO

if sys.platform != "win32":
    import termios

__all__ = ["KeyReader", "decode_keys", "input_fd"]

# the arrows in both cursor-key modes a terminal may be in: normal (CSI) and application (SS3)
_SEQUENCES = {
    b"\x1b[A": "up",
    b"\x1b[B": "down",
    b"\x1b[C": "right",
    b"\x1b[D": "left",
    b"\x1bOA": "up",
    b"\x1bOB": "down",
    b"\x1bOC": "right",
    b"\x1bOD": "left",
}


def decode_keys(data: bytes) -> tuple[list[str], bytes]:
    """The keys in ``data`` and the unfinished escape sequence at its end (to prepend to the
    next read). Arrows are named ``up``/``down``/``left``/``right``, a lone Esc ``escape``,
    other characters are themselves (lower case); other escape sequences are skipped.
    """
    keys: list[str] = []
    i = 0
    while i < len(data):
        if data[i] != 0x1B:
            keys.append(chr(data[i]).lower())
            i += 1
            continue
        if data[i : i + 3] in _SEQUENCES:
            keys.append(_SEQUENCES[data[i : i + 3]])
            i += 3
        elif i + 1 == len(data):
            return keys, data[i:]  # Esc alone, or the start of a sequence: wait for more
        elif data[i + 1 : i + 2] in (b"[", b"O"):
            end = i + 2
            while end < len(data) and not 0x40 <= data[end] <= 0x7E:
                end += 1
            if end >= len(data):
                return keys, data[i:]
            i = end + 1  # a key we do not use (F-keys, Home, ...)
        else:
            keys.append("escape")
            i += 1
    return keys, b""


class KeyReader:
    """Reads key presses from a file descriptor; a terminal is put in cbreak mode (keys arrive
    at once, unechoed; Ctrl-C still interrupts) until :meth:`restore`."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd
        self._pending = b""
        self._saved: list[Any] | None = None

    @property
    def active(self) -> bool:
        """False without input, or once it reached its end or failed."""
        return self.fd is not None

    def enter(self) -> None:
        """Save the terminal mode and switch to cbreak mode (terminals only)."""
        if sys.platform == "win32" or self.fd is None or not os.isatty(self.fd):
            return
        saved = termios.tcgetattr(self.fd)
        mode = termios.tcgetattr(self.fd)
        mode[3] &= ~(termios.ECHO | termios.ICANON)
        mode[6][termios.VMIN] = 1
        mode[6][termios.VTIME] = 0
        self._saved = saved
        termios.tcsetattr(self.fd, termios.TCSANOW, mode)

    def restore(self) -> None:
        """Put the terminal mode back as it was (idempotent)."""
        saved, self._saved = self._saved, None
        if sys.platform != "win32" and saved is not None and self.fd is not None:
            termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)

    def read(self, timeout: float) -> list[str]:
        """The keys pressed, waiting up to ``timeout`` seconds for the first."""
        if self.fd is None:
            return []
        try:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            data = os.read(self.fd, 1024) if ready else None
        except (OSError, ValueError):  # closed or hung up: the screen goes on without keys
            data = b""
        if data is None:
            pending, self._pending = self._pending, b""
            return ["escape"] if pending == b"\x1b" else []
        if not data:
            self.fd = None  # end of input: no more keys
            return []
        keys, self._pending = decode_keys(self._pending + data)
        return keys


def input_fd(stream: TextIO | int | None) -> int | None:
    """The descriptor keys are read from: ``stream``'s, or stdin's if it is a terminal (piped
    data is not a person typing)."""
    if isinstance(stream, int):
        return stream
    try:
        if stream is not None:
            return stream.fileno()
        fd = sys.stdin.fileno() if sys.stdin is not None else None
        return fd if fd is not None and os.isatty(fd) else None
    except (AttributeError, OSError, ValueError):  # closed, or replaced by one without a file
        return None
