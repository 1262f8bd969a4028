"""Fixtures for the training tests."""

from __future__ import annotations

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
