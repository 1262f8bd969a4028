"""Tests for ember.data._batcher: batcher normalisation and BatchBuilder."""

from __future__ import annotations

import pytest
import torch

from ember.data import InMemDataset
from ember.data._batcher import BatchBuilder, batch_function


class Stack:
    def batch(self, items: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        return torch.stack(items).to(device)


def test_a_batcher_object_and_a_function_are_both_accepted() -> None:
    """batch_function returns the object's batch method, or the function itself."""
    items = [torch.ones(2), torch.zeros(2)]
    cpu = torch.device("cpu")
    assert torch.equal(batch_function(Stack())(items, cpu), torch.stack(items))

    def stack(items: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        return torch.stack(items)

    assert batch_function(stack) is stack


@pytest.mark.parametrize("bad", [None, 3, "stack", object()])
def test_anything_else_is_a_type_error(bad: object) -> None:
    """Neither a Batcher nor callable: TypeError showing the value."""
    with pytest.raises(TypeError, match="batcher must have a batch"):
        batch_function(bad)  # type: ignore[arg-type]  # the wrong type is the test


def test_batch_builder_fetches_items_and_calls_the_batcher_on_its_device() -> None:
    """BatchBuilder(indexes) = batcher([dataset[i] for i in indexes], device)."""
    calls = []

    def record(items: list[str], device: torch.device) -> str:
        calls.append(device)
        return "".join(items)

    build = BatchBuilder(InMemDataset("abcdef"), record, torch.device("meta"))
    assert build([4, 0, 2]) == "eac"
    assert calls == [torch.device("meta")]
