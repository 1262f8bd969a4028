"""What the DDP tests assert of a job: its ranks' weights and its Loss logs against one process."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn


def losses(path: Path) -> list[tuple[float, str]]:
    """A Loss.log's lines as (value, weight)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [(float(value), weight) for value, weight in (line.split(",") for line in lines)]


def assert_weights_equal(files: Iterable[Path], model: nn.Module, atol: float = 1e-6) -> None:
    """Every rank's saved weights equal ``model``'s (one process's) within ``atol``."""
    for file in files:
        weights = load_file(file)
        for name, tensor in model.state_dict().items():
            torch.testing.assert_close(weights[name], tensor.cpu(), rtol=0, atol=atol)


def assert_losses_equal(ours: Path, theirs: Path) -> list[tuple[float, str]]:
    """Two Loss.log files have the same lines: weights exactly, values within 1e-6; returns ours."""
    mine, reference = losses(ours), losses(theirs)
    assert [weight for _, weight in mine] == [weight for _, weight in reference]
    assert [value for value, _ in mine] == pytest.approx([v for v, _ in reference], abs=1e-6)
    return mine
