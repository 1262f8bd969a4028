"""FileCheckpointer: atomic safetensors files that are verified and never run code on load."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ember._errors import CheckpointError
from ember._rundir.atomic import atomic_write
from ember._rundir.checkpoints import read_metadata
from ember.extend import CheckpointFile, Record
from ember.train import FileCheckpointer


def sample_record() -> Record:
    base = torch.arange(24.0).reshape(4, 6)
    return Record(
        tensors={
            "w": base.t(),  # not contiguous
            "v": base[1],  # shares memory with w
            "step": torch.tensor(3.0),  # 0-dim
            "empty": torch.zeros(0, 2),
            "mask": torch.tensor([True, False]),
        },
        metadata={"a": [1, 2.5, None], "b": {"c": "é"}},
    )


def test_path_follows_burns_naming(tmp_path: Path) -> None:
    """Files are {directory}/{name}-{epoch}.safetensors; the directory is created by the first
    write (describing a run writes nothing)."""
    checkpointer = FileCheckpointer(tmp_path / "a" / "b", "model")
    assert checkpointer.path(7) == tmp_path / "a" / "b" / "model-7.safetensors"
    assert not (tmp_path / "a").exists()
    checkpointer.save(7, Record(tensors={"w": torch.zeros(2)}))
    assert (tmp_path / "a" / "b" / "model-7.safetensors").is_file()


def test_save_restore_round_trip(tmp_path: Path) -> None:
    """What restore returns equals what was saved; save reports the bytes it wrote."""
    checkpointer = FileCheckpointer(tmp_path, "optim")
    record = sample_record()
    written = checkpointer.save(2, record)
    data = checkpointer.path(2).read_bytes()
    assert written == CheckpointFile(
        "optim-2.safetensors", len(data), hashlib.sha256(data).hexdigest()
    )
    restored = checkpointer.restore(2, written)
    assert restored.metadata == record.metadata
    assert restored.tensors.keys() == record.tensors.keys()
    for key, tensor in record.tensors.items():
        assert restored.tensors[key].dtype == tensor.dtype
        assert torch.equal(restored.tensors[key], tensor), key
    assert sorted(os.listdir(tmp_path)) == ["optim-2.safetensors"]  # no temp file left


def test_zero_tensor_record(tmp_path: Path) -> None:
    """A record without tensors (a scheduler's state) works."""
    checkpointer = FileCheckpointer(tmp_path, "scheduler")
    written = checkpointer.save(1, Record(metadata={"step": 4}))
    assert checkpointer.restore(1, written).metadata == {"step": 4}


def test_header_is_safetensors_with_ember_json(tmp_path: Path) -> None:
    """The file is safetensors; its __metadata__ holds one JSON document under "ember"."""
    checkpointer = FileCheckpointer(tmp_path, "state")
    checkpointer.save(3, Record(metadata={"x": 1}))
    data = checkpointer.path(3).read_bytes()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    assert json.loads(header["__metadata__"]["ember"]) == {
        "format": "ember.checkpoint",
        "version": 1,
        "name": "state",
        "epoch": 3,
        "metadata": {"x": 1},
    }


def test_file_under_another_epoch_is_refused(tmp_path: Path) -> None:
    """A file copied to another epoch's or name's path is not taken for that one."""
    model = FileCheckpointer(tmp_path, "model")
    model.save(1, sample_record())
    model.path(2).write_bytes(model.path(1).read_bytes())
    with pytest.raises(CheckpointError, match=r"model-2\.safetensors holds 'model' of epoch 1"):
        model.restore(2)
    FileCheckpointer(tmp_path, "optim").path(1).write_bytes(model.path(1).read_bytes())
    with pytest.raises(CheckpointError, match="expected 'optim' of epoch 1"):
        FileCheckpointer(tmp_path, "optim").restore(1)


def test_restore_checks_expected_size_and_hash(tmp_path: Path) -> None:
    """A file that differs from what was written raises CheckpointError naming it."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    written = checkpointer.save(1, sample_record())
    path = checkpointer.path(1)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # in the tensor data: only the hash can tell
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=rf"{path}.*SHA-256 is [0-9a-f]{{64}}, expected"):
        checkpointer.restore(1, written)
    path.write_bytes(bytes(data[:-5]))
    with pytest.raises(CheckpointError, match=rf"{path}.*size is {len(data) - 5} bytes, expected"):
        checkpointer.restore(1, written)
    path.unlink()
    with pytest.raises(CheckpointError, match=f"{path} is missing"):
        checkpointer.restore(1, written)


def test_damage_never_escapes_as_another_error(tmp_path: Path) -> None:
    """Any truncation or flipped bit gives a Record or a CheckpointError, never anything else."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    checkpointer.save(1, sample_record())
    path = checkpointer.path(1)
    good = path.read_bytes()

    @settings(max_examples=150, deadline=None)
    @given(offset=st.integers(0, len(good) - 1), bit=st.integers(0, 7), cut=st.booleans())
    def check(offset: int, bit: int, cut: bool) -> None:
        damaged = bytearray(good)
        if cut:
            damaged = damaged[:offset]
        else:
            damaged[offset] ^= 1 << bit
        path.write_bytes(bytes(damaged))
        try:
            checkpointer.restore(1)
        except CheckpointError:
            pass
        else:
            assert not cut, "a truncated file must not load"

    check()


@pytest.mark.parametrize("name", ["", "a/b", "..", ".", "a\\b", "a\0b", 3])
def test_bad_names_are_refused(tmp_path: Path, name: object) -> None:
    """The name must be a plain file-name stem."""
    with pytest.raises(ValueError, match=f"got {name!r}".replace("\\", "\\\\")):
        FileCheckpointer(tmp_path, name)  # type: ignore[arg-type]  # invalid on purpose


@pytest.mark.parametrize(
    ("epoch", "error"),
    [(0, ValueError), (-1, ValueError), (True, TypeError), (1.5, TypeError), ("1", TypeError)],
)
def test_bad_epochs_are_refused(tmp_path: Path, epoch: object, error: type[Exception]) -> None:
    """Epochs are ints >= 1: another type is a TypeError, a smaller int a ValueError."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    for call in (checkpointer.path, checkpointer.delete, checkpointer.restore):
        with pytest.raises(error, match=f"epoch must be .*got {epoch!r}"):
            call(epoch)  # type: ignore[arg-type]  # invalid on purpose


def test_directory_that_is_a_file_is_refused(tmp_path: Path) -> None:
    """A directory path that is a file raises ValueError naming it."""
    path = tmp_path / "taken"
    path.write_text("")
    with pytest.raises(ValueError, match="taken"):
        FileCheckpointer(path, "model")


def test_delete_missing_is_fine(tmp_path: Path) -> None:
    """Deleting a checkpoint that does not exist is not an error."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    checkpointer.delete(4)
    checkpointer.save(4, Record())
    checkpointer.delete(4)
    assert not checkpointer.path(4).exists()


def test_crash_before_rename_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An error between writing the temp file and renaming it leaves the final file as it was."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    old = checkpointer.save(1, Record(metadata={"v": 1}))

    class Crash(BaseException):
        pass

    def crash(src: object, dst: object) -> None:
        assert Path(str(src)).read_bytes()  # the temp file was written completely
        raise Crash

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(Crash):
        checkpointer.save(1, Record(metadata={"v": 2}))
    monkeypatch.undo()
    assert checkpointer.restore(1, old).metadata == {"v": 1}
    assert os.listdir(tmp_path) == ["model-1.safetensors"]


def test_leftover_temps_are_ignored_then_cleaned(tmp_path: Path) -> None:
    """Temp files from a crash are ignored by restore and removed by the next save."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    checkpointer.save(1, Record(metadata={"v": 1}))
    stale = tmp_path / ".model-2.safetensors.0123456789abcdef.tmp"
    stale.write_bytes(b"half a file")
    other = tmp_path / ".optim-2.safetensors.0123456789abcdef.tmp"
    other.write_bytes(b"another checkpointer's")
    unrelated = tmp_path / "notes.tmp"
    unrelated.write_text("mine")
    assert checkpointer.restore(1).metadata == {"v": 1}
    with pytest.raises(CheckpointError, match="missing"):
        checkpointer.restore(2)
    checkpointer.save(3, Record())
    assert not stale.exists()
    assert other.exists()
    assert unrelated.exists()


def test_atomic_write_replaces_whole_files(tmp_path: Path) -> None:
    """atomic_write leaves the new content and no temp file."""
    path = tmp_path / "x.json"
    atomic_write(path, b"one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["x.json"]


def test_atomic_write_without_sync_flushes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sync=False (config.json): still whole and renamed into place, but no fsync at all; the
    default flushes the file and its directory."""
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", calls.append)
    path = tmp_path / "x.json"
    atomic_write(path, b"one", sync=False)
    assert path.read_bytes() == b"one" and os.listdir(tmp_path) == ["x.json"]
    assert calls == []
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two" and len(calls) == 2


@pytest.mark.timeout(30)  # reading /dev/zero or a FIFO would never end
@pytest.mark.parametrize("kind", ["symlink to /dev/zero", "FIFO"])
def test_restore_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """A checkpoint file replaced by a link to /dev/zero or by a FIFO is refused at once, with
    or without the size a manifest states, and never read."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    written = checkpointer.save(1, sample_record())
    path = checkpointer.path(1)
    path.unlink()
    if kind == "FIFO":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    message = rf"checkpoint file {path} is not a regular file \(a FIFO, a device or a link"
    for expected in (written, CheckpointFile(written.name, 0, written.sha256), None):
        with pytest.raises(CheckpointError, match=message):
            checkpointer.restore(1, expected)


def test_restore_reads_no_more_than_the_stated_size(tmp_path: Path) -> None:
    """A file longer than its manifest says is refused by its size, before being read."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    written = checkpointer.save(1, sample_record())
    with checkpointer.path(1).open("ab") as handle:
        handle.write(b"\0" * 1000)
    with pytest.raises(
        CheckpointError, match=rf"its size is {written.size + 1000} bytes, expected"
    ):
        checkpointer.restore(1, written)


def test_nested_ember_header_is_a_checkpoint_error(tmp_path: Path) -> None:
    """An ember header nested 100,000 deep is refused naming the file, not a RecursionError."""
    path = tmp_path / "model-1.safetensors"
    document = "[" * 100_000 + "]" * 100_000
    header = json.dumps({"__metadata__": {"ember": document}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header)
    with pytest.raises(CheckpointError, match=rf"checkpoint file {path} .*nested too deeply"):
        FileCheckpointer(tmp_path, "model").restore(1)


def test_non_finite_record_is_refused_naming_the_tensor(tmp_path: Path) -> None:
    """A record with a NaN or an infinity writes nothing and names the tensor."""
    checkpointer = FileCheckpointer(tmp_path, "model")
    for bad in (float("nan"), float("inf")):
        record = Record(tensors={"ok": torch.ones(3), "w": torch.tensor([1.0, bad])})
        with pytest.raises(CheckpointError, match=r"model-1\.safetensors .* in tensor 'w'"):
            checkpointer.save(1, record)
        assert list(tmp_path.iterdir()) == []


def test_read_metadata_reads_the_header_alone_and_names_a_bad_file(tmp_path: Path) -> None:
    """read_metadata gives a record's metadata from the safetensors header (what resume_latest
    checks a step checkpoint's state with); a header claiming 1 TB or cut short is refused
    naming the file."""
    checkpointer = FileCheckpointer(tmp_path, "state")
    checkpointer.save(2, Record(tensors={"t": torch.zeros(3)}, metadata={"step": 8}))
    path = checkpointer.path(2)
    assert read_metadata(path, "state", 2) == {"step": 8}
    with pytest.raises(CheckpointError, match="holds 'state' of epoch 2, expected 'state' of"):
        read_metadata(path, "state", 3)
    data = path.read_bytes()
    path.write_bytes((10**12).to_bytes(8, "little") + data[8:])
    with pytest.raises(CheckpointError, match=r"state-2\.safetensors is not a safetensors file"):
        read_metadata(path, "state", 2)
    path.write_bytes(data[:20])
    with pytest.raises(CheckpointError, match="is not a safetensors file or is truncated"):
        read_metadata(path, "state", 2)
