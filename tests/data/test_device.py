"""Tests for ember._device: device arguments and moving nested batches."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any, NamedTuple

import pytest
import torch

from ember._device import as_device
from ember.data import move_to_device

META = torch.device("meta")


class Pair(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


@dataclasses.dataclass(frozen=True)
class Sample:
    x: torch.Tensor
    label: str
    cached: torch.Tensor = dataclasses.field(init=False, default_factory=lambda: torch.ones(1))


def test_tensors_move_through_nested_containers() -> None:
    """Tensors in tuples, lists, dicts, NamedTuples and dataclasses move; the rest is kept."""
    batch: dict[str, Any] = {
        "pair": Pair(torch.ones(2), torch.zeros(2)),
        "list": [torch.ones(1), 3, "text"],
        "tuple": (torch.ones(1),),
        "sample": Sample(torch.ones(3), "cat"),
    }
    moved = move_to_device(batch, META)
    assert isinstance(moved["pair"], Pair)
    assert moved["pair"].x.device == META
    assert moved["pair"].y.device == META
    assert moved["list"][0].device == META
    assert moved["list"][1:] == [3, "text"]
    assert moved["tuple"][0].device == META
    assert isinstance(moved["sample"], Sample)
    assert moved["sample"].x.device == META
    assert moved["sample"].label == "cat"
    assert batch["pair"].x.device == torch.device("cpu")  # the input is not modified


def test_mapping_types_are_kept() -> None:
    """A defaultdict stays a defaultdict with its factory."""
    batch: collections.defaultdict[str, torch.Tensor] = collections.defaultdict(torch.zeros)
    batch["x"] = torch.ones(1)
    moved = move_to_device(batch, META)
    assert type(moved) is collections.defaultdict
    assert moved.default_factory is torch.zeros
    assert moved["x"].device == META


def test_as_device_normalises_and_checks() -> None:
    """Strings become torch.device; anything else names the argument."""
    assert as_device("cpu") == torch.device("cpu")
    assert as_device(META) is META
    with pytest.raises(ValueError, match="device is not a valid device: 'cpux'"):
        as_device("cpux")
    with pytest.raises(TypeError, match=r"where must be a str or torch\.device, got 1"):
        as_device(1, "where")  # type: ignore[arg-type]  # the wrong type is the test
