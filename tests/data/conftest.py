"""Fixtures shared by the data layer's tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.data.helpers import assert_threads_exit


@pytest.fixture
def thread_baseline() -> Iterator[set[threading.Thread]]:
    """The threads alive before the test; the test must leave none of its own behind."""
    baseline = set(threading.enumerate())
    yield baseline
    assert_threads_exit(baseline)
