"""Fixtures for the training tests."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from tests.train.fixtures import TinyRegressor


@pytest.fixture
def model() -> TinyRegressor:
    torch.manual_seed(0)
    return TinyRegressor()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def threads_before() -> set[threading.Thread]:
    """The threads alive before the test (see ``fixtures.ember_threads``)."""
    return set(threading.enumerate())
