"""AsyncCheckpointer: any Checkpointer on the checkpoint-writer thread, errors surfacing once."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ember.extend import Record
from ember.train import FileCheckpointer
from ember.train._checkpoint.asynchronous import AsyncCheckpointer


def test_save_restore_delete(tmp_path: Path) -> None:
    """Saves and deletes run in order in the background; restore sees them."""
    files = FileCheckpointer(tmp_path, "model")
    checkpointer = AsyncCheckpointer(files)
    assert checkpointer.save(1, Record(metadata={"v": 1})) is None
    checkpointer.save(2, Record(metadata={"v": 2}))
    checkpointer.delete(1)
    assert checkpointer.restore(2).metadata == {"v": 2}
    assert not files.path(1).exists()
    checkpointer.close()
    assert not any(t.name == "checkpoint-writer" and t.is_alive() for t in threading.enumerate())


def test_error_surfaces_once_on_next_save(tmp_path: Path) -> None:
    """A failed save is re-raised by the next save, once, naming the epoch."""
    files = FileCheckpointer(tmp_path, "model")
    checkpointer = AsyncCheckpointer(files)
    files.path(1).mkdir()
    checkpointer.save(1, Record())
    with pytest.raises(IsADirectoryError) as info:
        checkpointer.flush()
    assert "saving epoch 1" in "".join(info.value.__notes__)
    checkpointer.save(2, Record())
    checkpointer.close()
    checkpointer.close()
    assert files.restore(2).metadata == {}


def test_later_failures_are_noted_on_the_first(tmp_path: Path) -> None:
    """Two failed writes surface as one error carrying a note about the second."""
    files = FileCheckpointer(tmp_path, "model")
    checkpointer = AsyncCheckpointer(files)
    files.path(1).mkdir()
    files.path(2).mkdir()
    checkpointer.save(1, Record())
    checkpointer.save(2, Record())
    with pytest.raises(IsADirectoryError) as info:
        checkpointer.close()
    notes = "".join(info.value.__notes__)
    assert "saving epoch 1" in notes
    assert "a later checkpoint write failed too" in notes
