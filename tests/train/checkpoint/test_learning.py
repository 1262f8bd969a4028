"""LearningCheckpointer: the seed's example on disk, verified restores, async writes and errors."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember._errors import CheckpointError
from ember.extend import Record, Save
from ember.train import (
    Direction,
    FileCheckpointer,
    KeepLastNCheckpoints,
    LearningCheckpointer,
    Split,
)
from ember.train._checkpoint.learning import TrainingRecords
from ember.train._checkpoint.record import model_record, optimizer_record, state_record
from ember.train._checkpoint.strategy import default_checkpointing_strategy

NAMES = ("model", "optim", "scheduler", "state")
TIMEOUT = 30.0  # seconds; only reached when something hangs


class LossQuery:
    """A MetricQuery over valid Loss values by epoch."""

    def __init__(self, losses: dict[int, float]) -> None:
        self.losses = losses

    def find_metric(self, name: str, epoch: int, split: Split) -> float | None:
        return self.losses.get(epoch) if name == "Loss" and split is Split.VALID else None

    def find_epoch(self, name: str, direction: Direction, split: Split) -> int | None:
        if name != "Loss" or split is not Split.VALID or 1 not in self.losses:
            return None
        return min(sorted(self.losses), key=self.losses.__getitem__)


def make_records(model: nn.Module, epoch: int) -> TrainingRecords:
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    return TrainingRecords(
        model=model_record(model),
        optim=optimizer_record(optim),
        scheduler=state_record({"step": epoch}),
        state=state_record({"epoch": epoch, "rng": [1, 2, 3]}),
    )


def run_epochs(
    checkpointer: LearningCheckpointer, losses: list[float], epochs: range | None = None
) -> None:
    model = nn.Linear(2, 1)
    for epoch in epochs or range(1, len(losses) + 1):
        query = LossQuery({e: losses[e - 1] for e in range(1, epoch + 1)})
        checkpointer.checkpoint(epoch, make_records(model, epoch), query)


def files_of(directory: Path, epochs: list[int]) -> list[str]:
    names = [f"{n}-{e}.safetensors" for e in epochs for n in NAMES]
    return sorted(names + [f"manifest-{e}.json" for e in epochs])


@pytest.fixture(params=[True, False], ids=["async", "sync"])
def asynchronous(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def writer_threads() -> int:
    return sum(thread.name == "checkpoint-writer" for thread in threading.enumerate())


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
    assert state["checkpointing_strategy"] == {"strategy": "KeepLastNCheckpoints"}


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


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[threading.Event, threading.Event]]:
    """Holds each FileCheckpointer.write (one file of a save) until released."""
    entered, release = threading.Event(), threading.Event()
    original = FileCheckpointer.write

    def gated(self: FileCheckpointer, epoch: int, record: Record) -> Any:
        entered.set()
        if not release.wait(TIMEOUT):
            raise TimeoutError("the test never released the writer")
        return original(self, epoch, record)

    monkeypatch.setattr(FileCheckpointer, "write", gated)
    yield entered, release
    release.set()


def test_weights_changed_after_checkpoint_are_not_saved(
    tmp_path: Path, gate: tuple[threading.Event, threading.Event]
) -> None:
    """Snapshot isolation: changing the weights while the writer is busy changes no file."""
    entered, release = gate
    model = nn.Linear(4, 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(1))
    cp.checkpoint(1, make_records(model, 1), LossQuery({}))
    assert entered.wait(TIMEOUT)  # the writer holds the records now
    assert threading.current_thread().name != "checkpoint-writer"
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.0).add_(7.0)
    release.set()
    cp.close()
    restored = cp.restore(1).model.tensors
    assert restored.keys() == before.keys()
    assert all(torch.equal(restored[k], v) for k, v in before.items())


def test_one_checkpoint_waits_at_most(
    tmp_path: Path, gate: tuple[threading.Event, threading.Event]
) -> None:
    """With a write in progress one more checkpoint is queued; the next call blocks."""
    entered, release = gate
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(5))
    run_epochs(cp, [1.0], range(1, 2))
    assert entered.wait(TIMEOUT)
    writer = next(t for t in threading.enumerate() if t.name == "checkpoint-writer")
    assert writer.daemon
    run_epochs(cp, [1.0] * 2, range(2, 3))  # queued
    third = threading.Thread(target=run_epochs, args=(cp, [1.0] * 3, range(3, 4)))
    third.start()
    third.join(0.2)
    assert third.is_alive()  # blocked behind the queued checkpoint
    release.set()
    third.join(TIMEOUT)
    assert not third.is_alive()
    cp.close()
    assert cp.complete_epochs() == [1, 2, 3]


def test_async_write_error_surfaces_once_on_next_checkpoint(tmp_path: Path) -> None:
    """A failed background write is re-raised once, by the next checkpoint(), with a note
    naming the epoch and the file; nothing was deleted after the failed save."""
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(1))
    run_epochs(cp, [1.0], range(1, 2))
    (tmp_path / "optim-2.safetensors").mkdir()  # os.replace cannot put a file there
    run_epochs(cp, [1.0] * 2, range(2, 3))
    assert cp.complete_epochs() == [1]  # waits; the error stays pending
    with pytest.raises(IsADirectoryError) as info:
        run_epochs(cp, [1.0] * 3, range(3, 4))
    notes = "".join(info.value.__notes__)
    assert "epoch 2" in notes
    assert "optim-2.safetensors" in notes
    assert not (tmp_path / "manifest-2.json").exists()
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path))
    (tmp_path / "optim-2.safetensors").rmdir()
    run_epochs(cp, [1.0] * 3, range(3, 4))
    cp.close()
    cp.close()
    assert cp.complete_epochs() == [1, 3]  # epoch 2's Delete(1) was skipped with its save


def test_pending_error_is_raised_before_the_strategy_decides(tmp_path: Path) -> None:
    """When checkpoint() re-raises an earlier error the strategy has not moved on, so calling
    it again for the same epoch decides exactly as before."""
    cp = LearningCheckpointer(tmp_path, default_checkpointing_strategy())
    losses = [3.0, 2.0, 1.0]
    run_epochs(cp, losses, range(1, 2))
    (tmp_path / "model-2.safetensors").mkdir()
    run_epochs(cp, losses, range(2, 3))
    cp.complete_epochs()  # the failure has happened
    before = cp.strategy.state_dict()
    with pytest.raises(IsADirectoryError):
        run_epochs(cp, losses, range(3, 4))
    assert cp.strategy.state_dict() == before
    run_epochs(cp, losses, range(3, 4))
    cp.close()


def test_async_write_error_surfaces_once_at_close(tmp_path: Path) -> None:
    """Without another checkpoint the error comes from close(), once."""
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(1))
    (tmp_path / "manifest-1.json").mkdir()
    run_epochs(cp, [1.0], range(1, 2))
    with pytest.raises(OSError, match=r"manifest-1\.json") as info:
        cp.close()
    assert "epoch 1" in "".join(info.value.__notes__)
    cp.close()
    cp.flush()
    with pytest.raises(CheckpointError, match="closed"):
        run_epochs(cp, [1.0], range(1, 2))


def test_flush_raises_the_pending_error(tmp_path: Path) -> None:
    """flush() waits for the writer and raises its error once."""
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(1))
    (tmp_path / "state-1.safetensors").mkdir()
    run_epochs(cp, [1.0], range(1, 2))
    with pytest.raises(IsADirectoryError):
        cp.flush()
    cp.flush()
    cp.close()


def test_sync_write_error_raises_at_once(tmp_path: Path) -> None:
    """With asynchronous=False the error comes from checkpoint() itself."""
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(1), asynchronous=False)
    run_epochs(cp, [1.0], range(1, 2))
    (tmp_path / "scheduler-2.safetensors").mkdir()
    with pytest.raises(IsADirectoryError) as info:
        run_epochs(cp, [1.0] * 2, range(2, 3))
    assert "scheduler-2.safetensors" in "".join(info.value.__notes__)
    assert cp.complete_epochs() == [1]
    cp.close()


def test_crash_before_rename_leaves_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An injected crash between temp write and rename leaves epoch 1 intact and no
    manifest for epoch 2."""
    cp = LearningCheckpointer(tmp_path, KeepLastNCheckpoints(1), asynchronous=False)
    run_epochs(cp, [1.0], range(1, 2))
    original = os.replace

    class CrashError(Exception):
        pass

    def crash_on_state(src: Any, dst: Any) -> None:
        if Path(dst).name == "state-2.safetensors":
            raise CrashError
        original(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_state)
    with pytest.raises(CrashError):
        run_epochs(cp, [1.0] * 2, range(2, 3))
    monkeypatch.undo()
    assert not (tmp_path / "manifest-2.json").exists()
    assert cp.complete_epochs() == [1]
    assert cp.restore(1).state.metadata["epoch"] == 1


def test_caller_errors(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Reserved state keys, bad actions and directories that are files are refused; a saved
    strategy state that does not fit a changed strategy is logged and ignored."""
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="file"):
        LearningCheckpointer(tmp_path / "file", KeepLastNCheckpoints(1))
    cp = LearningCheckpointer(tmp_path / "d", KeepLastNCheckpoints(1), asynchronous=False)
    records = make_records(nn.Linear(1, 1), 1)
    bad = TrainingRecords(
        records.model, records.optim, records.scheduler, state_record({"checkpointing_strategy": 1})
    )
    with pytest.raises(ValueError, match="checkpointing_strategy"):
        cp.checkpoint(1, bad, LossQuery({}))
    cp.checkpoint(1, records, LossQuery({}))
    cp.close()

    class Odd:
        def checkpointing(self, epoch: int, query: object) -> list[object]:
            return [Save(), "delete"]

        def state_dict(self) -> dict[str, Any]:
            return {}

        def load_state_dict(self, state: dict[str, Any]) -> None:
            raise ValueError("not mine")

    odd = LearningCheckpointer(tmp_path / "d", Odd(), asynchronous=False)  # type: ignore[arg-type]  # invalid on purpose
    with pytest.raises(TypeError, match="'delete'"):
        odd.checkpoint(2, records, LossQuery({}))
    with caplog.at_level(logging.WARNING):
        assert odd.restore(1).state.metadata["epoch"] == 1
    assert "does not fit" in caplog.text
    odd.close()
