"""Tests for ember.data._builder: defaults, chaining, which loader is built, argument checks."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ember.data import BatchDataLoader, DataLoaderBuilder, InMemDataset, MultiThreadDataLoader
from tests.data.helpers import Batch, batches_of, epochs_of, item_batcher


def test_defaults_are_batch_one_in_order_on_cpu_without_workers() -> None:
    """Without settings: batches of 1, in dataset order, built on the caller's thread, on CPU."""
    data = DataLoaderBuilder(item_batcher).build(InMemDataset([5, 6, 7]))
    assert type(data) is BatchDataLoader
    assert data.device == torch.device("cpu")
    assert batches_of(data) == [[5], [6], [7]]


def test_methods_chain_on_the_same_builder() -> None:
    """Every setting returns the builder itself."""
    builder: DataLoaderBuilder[int, Batch] = DataLoaderBuilder(item_batcher)
    assert builder.batch_size(2) is builder
    assert builder.shuffle(1) is builder
    assert builder.num_workers(0) is builder
    assert builder.set_device("cpu") is builder


def test_workers_select_the_multi_thread_loader_with_the_same_batches() -> None:
    """num_workers > 0 builds a MultiThreadDataLoader yielding the single-thread batches."""
    builder = DataLoaderBuilder(item_batcher).batch_size(4).shuffle(9)
    single = builder.build(list(range(23)))
    with builder.num_workers(2).build(list(range(23))) as multi:
        assert isinstance(multi, MultiThreadDataLoader)
        assert epochs_of(multi, 2) == epochs_of(single, 2)


def test_set_device_accepts_strings_and_devices() -> None:
    """set_device takes "meta" or torch.device("meta"); batches are built there."""
    for device in ("meta", torch.device("meta")):
        data = DataLoaderBuilder(item_batcher).set_device(device).build([1])
        assert data.device == torch.device("meta")
        assert next(iter(data))[1] == torch.device("meta")


@pytest.mark.parametrize(
    ("method", "value", "error", "message"),
    [
        ("batch_size", 0, ValueError, r"^batch_size must be >= 1, got 0$"),
        ("batch_size", -2, ValueError, "batch_size must be >= 1, got -2"),
        ("batch_size", 3.0, TypeError, r"batch_size must be an int, got 3.0 \(float\)"),
        ("batch_size", None, TypeError, "batch_size must be an int, got None"),
        ("num_workers", -1, ValueError, "num_workers must be >= 0, got -1"),
        ("num_workers", "2", TypeError, "num_workers must be an int, got '2'"),
        ("shuffle", True, TypeError, r"seed must be an int, got True \(bool\)"),
        ("shuffle", 1.0, TypeError, "seed must be an int, got 1.0"),
        ("shuffle", -5, ValueError, "seed must be >= 0, got -5"),
        ("set_device", "gpu9", ValueError, "device is not a valid device: 'gpu9'"),
        ("set_device", 3, TypeError, "device must be a str or torch.device, got 3"),
    ],
)
def test_bad_settings_are_refused_at_the_call(
    method: str, value: Any, error: type[Exception], message: str
) -> None:
    """Each setting is checked when called, naming the argument and the value."""
    builder = DataLoaderBuilder(item_batcher)
    with pytest.raises(error, match=message):
        getattr(builder, method)(value)


def test_build_refuses_an_empty_dataset_and_a_non_dataset() -> None:
    """build() of an empty dataset is a ValueError, of something that is neither a dataset nor a
    streaming source a TypeError naming what it may be."""
    builder = DataLoaderBuilder(item_batcher).num_workers(2)
    with pytest.raises(ValueError, match="dataset is empty"):
        builder.build([])
    with pytest.raises(
        TypeError, match=r"source must be a Dataset .* or a function returning an iterator"
    ):
        builder.build(None)  # type: ignore[call-overload]  # the wrong type is the test


def test_batcher_must_be_a_batcher_or_a_function() -> None:
    """A batcher that is neither a Batcher nor callable is refused by the builder's constructor."""
    with pytest.raises(TypeError, match="batcher must have a batch"):
        DataLoaderBuilder("stack")  # type: ignore[call-overload]  # the wrong type is the test


@pytest.mark.parametrize("workers", [0, 2])
def test_batcher_returning_none_is_reported_at_the_first_batch(workers: int) -> None:
    """A batcher returning None builds fine, then fails at the first batch, naming the batcher."""

    def forgot_return(items: list[int], device: torch.device) -> None:
        pass

    data = DataLoaderBuilder(forgot_return).num_workers(workers).build([1, 2])
    with data, pytest.raises(TypeError, match=r"forgot_return.* returned None"):
        next(iter(data))


@pytest.mark.parametrize("workers", [0, 2])
def test_wrong_shaped_item_error_names_the_batch_and_epoch(workers: int) -> None:
    """An item of the wrong shape fails in the batcher; with or without workers the error
    carries a note naming the batch (0-based) and the epoch."""

    def stack(items: list[list[float]], device: torch.device) -> torch.Tensor:
        return torch.tensor(items, device=device)

    items = [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0]]  # the last item is short
    data = DataLoaderBuilder(stack).batch_size(2).num_workers(workers).build(items)
    with data, pytest.raises(ValueError, match="expected sequence of length 2") as info:
        list(data)
    assert any(note.endswith("building batch 1 of epoch 1") for note in info.value.__notes__)


def test_set_device_refuses_a_device_this_machine_lacks() -> None:
    """'cuda:7' on a machine without it is refused at the call, saying what the machine has."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count > 7:
        pytest.skip("this machine has a cuda:7")
    with pytest.raises(
        ValueError,
        match=rf"device 'cuda:7' is not available on this machine: "
        rf"it has {count} CUDA device",
    ):
        DataLoaderBuilder(item_batcher).set_device("cuda:7")
