"""Fixtures for the renderer tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.train.renderer.tui.screen import Screen


@pytest.fixture
def make_screen() -> Iterator[Callable[..., Screen]]:
    screens: list[Screen] = []

    def make(**options: Any) -> Screen:  # Screen's own keywords, passed through
        screen = Screen(**options)
        screens.append(screen)
        return screen

    yield make
    for screen in screens:
        screen.tui.close()
        screen.close_pipe()


@pytest.fixture
def screen(make_screen: Callable[..., Screen]) -> Screen:
    return make_screen()
