"""LearningCheckpointer writes: what an async write saves, how long it waits, where its errors
surface, what a crash leaves, bad calls."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember._errors import CheckpointError
from ember.extend import Record, Save
from ember.train import FileCheckpointer, KeepLastNCheckpoints, LearningCheckpointer
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.record import state_record
from ember.train._checkpoint.strategy import default_checkpointing_strategy
from tests.train.checkpoint.learning.helpers import TIMEOUT, LossQuery, make_records, run_epochs


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
