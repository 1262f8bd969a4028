"""LearningCheckpointer on disk: the seed's example, verified restores, damaged or edited
files refused, no pickle ever run."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember._errors import CheckpointError
from ember.train import FileCheckpointer, KeepLastNCheckpoints, LearningCheckpointer
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.record import state_record
from ember.train._checkpoint.strategy import default_checkpointing_strategy
from tests.train.checkpoint.learning.helpers import (
    NAMES,
    LossQuery,
    files_of,
    make_records,
    run_epochs,
    writer_threads,
)


@pytest.fixture(params=[True, False], ids=["async", "sync"])
def asynchronous(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.mark.parametrize(
    ("losses", "kept"),
    [([3.0, 2.0, 1.0], [2, 3]), ([1.0, 2.0, 3.0], [1, 2, 3])],
    ids=["loss-falling", "best-at-epoch-1"],
)
def test_seed_worked_example_on_disk(
    tmp_path: Path, asynchronous: bool, losses: list[float], kept: list[int]
) -> None:
    """Default strategy: falling loss keeps epochs 2, 3; best epoch 1 keeps 1, 2, 3."""
    threads = writer_threads()
    with LearningCheckpointer(
        tmp_path, default_checkpointing_strategy(), asynchronous=asynchronous
    ) as checkpointer:
        run_epochs(checkpointer, losses)
        assert checkpointer.complete_epochs() == kept
        assert checkpointer.latest_complete_epoch() == 3
    assert sorted(os.listdir(tmp_path)) == files_of(tmp_path, kept)
    assert writer_threads() == threads


def test_restore_returns_the_records_and_strategy_state(tmp_path: Path, asynchronous: bool) -> None:
    """restore gives back the four records; the strategy state is loaded, not returned."""
    model = nn.Linear(3, 2)
    records = make_records(model, 1)
    with LearningCheckpointer(tmp_path, KeepLastNCheckpoints(2), asynchronous=asynchronous) as cp:
        cp.checkpoint(1, records, LossQuery({}))
        restored = cp.restore(1)
    assert restored.state.metadata == {"epoch": 1, "rng": [1, 2, 3]}
    assert restored.scheduler.metadata == {"step": 1}
    for key, tensor in records.model.tensors.items():
        assert torch.equal(restored.model.tensors[key], tensor)
    assert restored.optim.metadata == records.optim.metadata
    state = FileCheckpointer(tmp_path, "state").restore(1).metadata
    assert state["checkpointing_strategy"] == {"strategy": "KeepLastNCheckpoints", "kept": [1]}


def test_resumed_run_makes_the_same_decisions(tmp_path: Path) -> None:
    """Resumed at epoch 2 with a fresh strategy object, the files on disk match an
    uninterrupted run (Burn's fresh strategy would leak epoch 1)."""
    losses = [3.0, 2.0, 1.0, 0.5, 0.7, 0.9]
    with LearningCheckpointer(tmp_path / "a", default_checkpointing_strategy()) as uninterrupted:
        run_epochs(uninterrupted, losses)
    with LearningCheckpointer(tmp_path / "b", default_checkpointing_strategy()) as first:
        run_epochs(first, losses, range(1, 3))
    with LearningCheckpointer(tmp_path / "b", default_checkpointing_strategy()) as resumed:
        assert resumed.latest_complete_epoch() == 2
        resumed.restore(2)
        run_epochs(resumed, losses, range(3, 7))
    with LearningCheckpointer(tmp_path / "c", default_checkpointing_strategy()) as first:
        run_epochs(first, losses, range(1, 3))
    with LearningCheckpointer(tmp_path / "c", default_checkpointing_strategy()) as fresh:
        run_epochs(fresh, losses, range(3, 7))  # no restore: Burn's behaviour
    expected = files_of(tmp_path, [4, 5, 6])
    assert sorted(os.listdir(tmp_path / "a")) == expected
    assert sorted(os.listdir(tmp_path / "b")) == expected
    assert sorted(os.listdir(tmp_path / "c")) != expected


def test_rewriting_an_epoch_replaces_it(tmp_path: Path) -> None:
    """Resuming before an existing epoch and checkpointing it again gives the new content."""
    with LearningCheckpointer(tmp_path, KeepLastNCheckpoints(5), asynchronous=False) as cp:
        run_epochs(cp, [1.0, 1.0])
        cp.restore(1)
        records = make_records(nn.Linear(2, 1), 2)
        records = TrainingRecords(
            records.model, records.optim, records.scheduler, state_record({"new": True})
        )
        cp.checkpoint(2, records, LossQuery({}))
        assert cp.restore(2).state.metadata == {"new": True}
        assert cp.complete_epochs() == [1, 2]


def test_missing_epoch_lists_the_complete_ones(tmp_path: Path) -> None:
    """Restoring an epoch that has no checkpoint names the epochs that do."""
    with LearningCheckpointer(tmp_path, default_checkpointing_strategy()) as cp:
        run_epochs(cp, [3.0, 2.0, 1.0])
        with pytest.raises(CheckpointError, match=r"epoch 1 .*complete epochs: \[2, 3\]"):
            cp.restore(1)
        with pytest.raises(ValueError, match="got 0"):
            cp.restore(0)


def corrupt(path: Path, kind: str) -> None:
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "flip":
        flipped = bytearray(data)
        flipped[len(data) - 3] ^= 0x10
        path.write_bytes(bytes(flipped))
    else:
        path.unlink()


@pytest.mark.parametrize("kind", ["truncate", "flip", "delete"])
@pytest.mark.parametrize("name", NAMES)
def test_damaged_file_is_named_and_skipped(tmp_path: Path, name: str, kind: str) -> None:
    """A truncated, bit-flipped or missing file raises CheckpointError naming it; the epoch
    stops being complete and the latest complete epoch falls back."""
    with LearningCheckpointer(tmp_path, KeepLastNCheckpoints(3), asynchronous=False) as cp:
        run_epochs(cp, [1.0, 1.0])
        corrupt(tmp_path / f"{name}-2.safetensors", kind)
        expected = {"truncate": "size is", "flip": "SHA-256 is", "delete": "missing"}[kind]
        with pytest.raises(CheckpointError, match=rf"{name}-2\.safetensors.*{expected}") as info:
            cp.restore(2)
        assert "complete epochs in" in "".join(info.value.__notes__)
        assert cp.complete_epochs() == [1]
        assert cp.latest_complete_epoch() == 1
        assert cp.restore(1).state.metadata["epoch"] == 1


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ("size", r"model-2\.safetensors is damaged: its size"),
        ("hash", r"model-2\.safetensors is damaged: its SHA-256"),
        ("json", r"manifest-2\.json is not valid JSON"),
        ("drop", r"manifest-2\.json does not list model-2\.safetensors"),
    ],
)
def test_edited_manifest_is_refused(tmp_path: Path, edit: str, message: str) -> None:
    """A manifest edited by hand raises CheckpointError naming the file and what differs."""
    with LearningCheckpointer(tmp_path, KeepLastNCheckpoints(3), asynchronous=False) as cp:
        run_epochs(cp, [1.0, 1.0])
        path = tmp_path / "manifest-2.json"
        document = json.loads(path.read_text())
        entry = document["files"][0]
        if edit == "size":
            entry["size"] += 1
        elif edit == "hash":
            entry["sha256"] = hashlib.sha256(b"other").hexdigest()
        elif edit == "drop":
            del document["files"][0]
        path.write_text("{not json" if edit == "json" else json.dumps(document))
        with pytest.raises(CheckpointError, match=message):
            cp.restore(2)
        assert cp.complete_epochs() == [1]


class Evil:
    """Unpickling this creates the sentinel file."""

    def __init__(self, sentinel: Path) -> None:
        self.sentinel = str(sentinel)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.sentinel, "w"))


@pytest.mark.parametrize("container", ["pickle", "torch.save"])
def test_malicious_pickle_never_runs(tmp_path: Path, container: str) -> None:
    """A pickle under every checkpoint file name, even with a matching manifest, is refused
    and its code never runs."""
    proof = tmp_path / "proof"
    pickle.loads(pickle.dumps(Evil(proof))).close()  # the payload is live: unpickling runs code
    assert proof.exists()

    directory = tmp_path / "checkpoint"
    sentinel = tmp_path / "sentinel"
    with LearningCheckpointer(directory, KeepLastNCheckpoints(1), asynchronous=False) as cp:
        run_epochs(cp, [1.0])
        files = []
        for name in NAMES:
            path = directory / f"{name}-1.safetensors"
            if container == "pickle":
                path.write_bytes(pickle.dumps(Evil(sentinel)))
            else:
                torch.save(Evil(sentinel), path)
            data = path.read_bytes()
            files.append(
                {"name": path.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            )
            with pytest.raises(CheckpointError, match=path.name):
                FileCheckpointer(directory, name).restore(1)
        manifest = directory / "manifest-1.json"
        manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "files": files}))
        with pytest.raises(CheckpointError, match=r"model-1\.safetensors"):
            cp.restore(1)
    assert not sentinel.exists()
