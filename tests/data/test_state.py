"""Loader state: JSON round trips that resume exactly, across worker counts ("exact resume")."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.data import BatchDataLoader, DataLoaderBuilder, InMemDataset
from ember.data._loader import STATE_KIND
from tests.data.helpers import Batch, batches_of, epochs_of, item_batcher

STATE = settings(max_examples=100, deadline=None)


def build(n: int, batch_size: int, seed: int | None, workers: int) -> BatchDataLoader[int, Batch]:
    builder = DataLoaderBuilder(item_batcher).batch_size(batch_size).num_workers(workers)
    if seed is not None:
        builder.shuffle(seed)
    return builder.build(InMemDataset(range(n)))


def through_json(state: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(json.dumps(state))
    return result


def stream_of(loader: BatchDataLoader[int, Batch], count: int) -> list[list[int]]:
    """The first ``count`` batches of the loader's passes, one pass after another."""
    produced: list[list[int]] = []
    while len(produced) < count:
        produced.extend(batches_of(loader))
    return produced[:count]


def test_state_has_the_documented_fields() -> None:
    """state_dict() holds the loader's identity and its position, as documented."""
    data = build(10, 3, 7, 0)
    iterator = iter(data)
    next(iterator)
    assert data.state_dict() == {
        "kind": STATE_KIND,
        "version": 2,
        "num_items": 10,
        "batch_size": 3,
        "seed": 7,
        "stream": [0],
        "epoch": 1,
        "batches_consumed": 1,
    }
    assert data.slice(2, 8).state_dict()["stream"] == [0, 1, 2, 8]


@STATE
@given(
    n=st.integers(1, 40),
    batch_size=st.integers(1, 7),
    seed=st.none() | st.integers(0, 1000),
    epochs_done=st.integers(0, 2),
    mid=st.integers(0, 10),
    workers=st.sampled_from([(0, 0), (0, 2), (2, 0), (2, 2)]),
)
def test_a_restored_loader_yields_exactly_what_the_original_would_have(
    n: int,
    batch_size: int,
    seed: int | None,
    epochs_done: int,
    mid: int,
    workers: tuple[int, int],
) -> None:
    """A JSON-round-tripped state resumes exactly, mid-epoch or not, across 0 and 2 workers."""
    save_workers, load_workers = workers
    with build(n, batch_size, seed, save_workers) as original:
        epochs_of(original, epochs_done)
        iterator = iter(original)
        taken = min(mid, len(original))
        for _ in range(taken):
            next(iterator)
        state = through_json(original.state_dict())
        expected = batches_of(iterator) + epochs_of(original, 2)
    with build(n, batch_size, seed, load_workers) as restored:
        restored.load_state_dict(state)
        assert stream_of(restored, len(expected)) == expected


@STATE
@given(
    n=st.integers(1, 30),
    batch_size=st.integers(1, 5),
    seed=st.integers(0, 1000),
    stops=st.lists(st.integers(0, 20), min_size=1, max_size=4),
)
def test_chained_restores_match_an_uninterrupted_run(
    n: int, batch_size: int, seed: int, stops: list[int]
) -> None:
    """Save, restore, run, save, restore...: the batches equal one uninterrupted run."""
    uninterrupted = build(n, batch_size, seed, 0)
    expected = epochs_of(uninterrupted, sum(stops) // len(uninterrupted) + 2)
    total = len(expected)
    produced: list[list[int]] = []
    state: dict[str, Any] | None = None
    for stop in stops:
        data = build(n, batch_size, seed, stop % 2)
        if state is not None:
            data.load_state_dict(state)
        iterator = iter(data)
        for _ in range(stop):
            batch = next(iterator, None)
            if batch is None:  # the pass ended: go on with the next epoch
                iterator = iter(data)
                batch = next(iterator)
            produced.append(batch[0])
        state = through_json(data.state_dict())
        data.close()
    final = build(n, batch_size, seed, 0)
    if state is not None:
        final.load_state_dict(state)
    produced.extend(stream_of(final, total - len(produced)))
    assert produced == expected


def test_progress_of_a_resumed_pass_counts_the_skipped_items() -> None:
    """A pass resumed after 2 of 4 batches reports those items as already processed."""
    original = build(10, 3, 1, 0)
    iterator = iter(original)
    next(iterator)
    next(iterator)
    restored = build(10, 3, 1, 2)
    restored.load_state_dict(original.state_dict())
    resumed = iter(restored)
    assert resumed.progress().items_processed == 6
    next(resumed)
    assert resumed.progress().items_processed == 9
    next(resumed)
    assert resumed.progress().is_completed
    restored.close()


def test_a_completed_pass_resumes_at_the_next_epoch() -> None:
    """A state saved after a whole epoch restores to the start of the following one."""
    original = build(9, 2, 3, 0)
    batches_of(original)
    restored = build(9, 2, 3, 0)
    restored.load_state_dict(through_json(original.state_dict()))
    assert restored.state_dict()["epoch"] == 1
    assert batches_of(restored) == batches_of(original)


@pytest.mark.parametrize(
    ("other", "field", "saved", "own"),
    [
        ({"n": 11}, "num_items", "10", "11"),
        ({"batch_size": 4}, "batch_size", "3", "4"),
        ({"seed": 8}, "seed", "7", "8"),
        ({"seed": None}, "seed", "7", "None"),
    ],
)
def test_loading_into_another_loader_names_the_field(
    other: dict[str, Any], field: str, saved: str, own: str
) -> None:
    """A state from another dataset length, batch size or seed is refused, naming both values."""
    settings_ = {"n": 10, "batch_size": 3, "seed": 7, "workers": 0} | other
    state = build(10, 3, 7, 0).state_dict()
    with pytest.raises(ValueError, match=f"{field} is {saved} in the state but {own} in this"):
        build(**settings_).load_state_dict(state)


def test_loading_a_slice_state_into_its_parent_names_the_stream() -> None:
    """A slice's state does not fit a loader of the same length on another stream."""
    parent = build(20, 2, 1, 0)
    state = parent.slice(0, 10).state_dict()
    with pytest.raises(ValueError, match="stream is"):
        build(20, 2, 1, 0).slice(10, 20).load_state_dict(state)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kind": "ember.data._torch_loader"}, "kind is 'ember.data._torch_loader' in the state"),
        ({"version": 3}, "its version is 3; this ember reads versions 1 and 2"),
        ({"batches_consumed": 5}, "batches_consumed must be <= 4"),
        ({"epoch": -1}, "epoch must be >= 0, got -1"),
        ({"epoch": 0, "batches_consumed": 1}, "0 before the first epoch"),
    ],
)
def test_malformed_states_are_refused(change: dict[str, Any], message: str) -> None:
    """Foreign kinds, unknown versions and impossible positions are ValueErrors."""
    state = build(10, 3, 7, 0).state_dict() | {"epoch": 1} | change
    with pytest.raises(ValueError, match=message):
        build(10, 3, 7, 0).load_state_dict(state)


def test_a_missing_field_is_named() -> None:
    """A state without a field names it."""
    state = build(10, 3, 7, 0).state_dict()
    del state["batches_consumed"]
    with pytest.raises(ValueError, match="no 'batches_consumed' field"):
        build(10, 3, 7, 0).load_state_dict(state)


def test_loading_a_state_stops_the_live_iterator() -> None:
    """After load_state_dict the previous iterator of that loader stops."""
    data = build(10, 3, 7, 0)
    iterator = iter(data)
    next(iterator)
    data.load_state_dict(build(10, 3, 7, 0).state_dict())
    assert list(iterator) == []
