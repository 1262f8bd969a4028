"""Suite-wide fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _cli_renderer(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs that pick the default renderer use the CLI one, even under `pytest -s` in a terminal
    (tests that exercise the TUI choose it explicitly)."""
    monkeypatch.setenv("EMBER_RENDERER", "cli")
