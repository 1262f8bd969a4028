"""Manifests: an epoch is complete only when its manifest parses and every file verifies."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ember._errors import CheckpointError
from ember._rundir.manifest import (
    Manifest,
    complete_epochs,
    delete_manifest,
    latest_complete_epoch,
    manifest_epochs,
    manifest_path,
    read_manifest,
    verify_manifest,
    write_manifest,
)
from ember.extend import Record
from ember.train import FileCheckpointer


def write_epoch(directory: Path, epoch: int) -> Manifest:
    files = [
        FileCheckpointer(directory, name).save(epoch, Record(metadata={"epoch": epoch}))
        for name in ("model", "optim")
    ]
    write_manifest(directory, epoch, files)
    return Manifest(epoch, tuple(files))


def test_write_read_round_trip(tmp_path: Path) -> None:
    """The manifest lists each file with its size and SHA-256 and reads back equal."""
    manifest = write_epoch(tmp_path, 2)
    assert read_manifest(tmp_path, 2) == manifest
    document = json.loads(manifest_path(tmp_path, 2).read_text())
    assert document["format"] == "ember.checkpoint.manifest"
    assert document["epoch"] == 2
    assert [entry["name"] for entry in document["files"]] == [
        "model-2.safetensors",
        "optim-2.safetensors",
    ]
    verify_manifest(tmp_path, manifest, required=("model", "optim"))


def test_complete_epochs_skip_damaged_and_unmanifested(tmp_path: Path) -> None:
    """Epochs without a manifest or with a damaged file are not complete; the latest falls back."""
    for epoch in (1, 2, 3):
        write_epoch(tmp_path, epoch)
    FileCheckpointer(tmp_path, "model").save(4, Record())  # no manifest: a crash mid-save
    assert complete_epochs(tmp_path) == [1, 2, 3]
    (tmp_path / "optim-3.safetensors").write_bytes(b"garbage")
    assert complete_epochs(tmp_path) == [1, 2]
    assert latest_complete_epoch(tmp_path) == 2
    (tmp_path / "model-2.safetensors").unlink()
    assert latest_complete_epoch(tmp_path) == 1
    assert complete_epochs(tmp_path, required=("model", "optim", "state")) == []
    assert latest_complete_epoch(tmp_path / "nowhere") is None


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["files"][0].update(size=d["files"][0]["size"] + 1), "size is"),
        (lambda d: d["files"][1].update(sha256="0" * 64), "optim-1.safetensors is damaged"),
        (lambda d: d["files"][0].update(name="../model-1.safetensors"), "invalid file entry"),
        (lambda d: d["files"][0].update(sha256="xyz"), "invalid file entry"),
        (lambda d: d.update(epoch=2), "is for epoch 2, expected 1"),
        (lambda d: d.update(version=99), "version 99"),
        (lambda d: d.update(files={}), "no list of files"),
    ],
)
def test_edited_manifest_is_refused(tmp_path: Path, edit: object, message: str) -> None:
    """A manifest whose entries were edited raises CheckpointError saying what differs."""
    write_epoch(tmp_path, 1)
    path = manifest_path(tmp_path, 1)
    document = json.loads(path.read_text())
    edit(document)  # type: ignore[operator]  # the parametrized lambdas
    path.write_text(json.dumps(document))
    with pytest.raises(CheckpointError, match=message):
        verify_manifest(tmp_path, read_manifest(tmp_path, 1))
    assert complete_epochs(tmp_path) == []


def test_invalid_json_manifest_names_the_file(tmp_path: Path) -> None:
    """A manifest that is not JSON raises CheckpointError naming it."""
    write_epoch(tmp_path, 1)
    manifest_path(tmp_path, 1).write_text('{"format": ')
    with pytest.raises(CheckpointError, match=r"manifest-1\.json is not valid JSON"):
        read_manifest(tmp_path, 1)
    with pytest.raises(CheckpointError, match=r"manifest-2\.json is missing"):
        read_manifest(tmp_path, 2)


def test_missing_required_file_is_named(tmp_path: Path) -> None:
    """A manifest that does not list a required checkpoint names the missing file."""
    manifest = write_epoch(tmp_path, 1)
    with pytest.raises(CheckpointError, match=r"does not list state-1\.safetensors"):
        verify_manifest(tmp_path, manifest, required=("model", "state"))


def test_delete_manifest_and_listing(tmp_path: Path) -> None:
    """Deleting a manifest makes its epoch incomplete; only valid manifest names are listed."""
    write_epoch(tmp_path, 1)
    write_epoch(tmp_path, 10)
    (tmp_path / "manifest-0.json").write_text("{}")
    (tmp_path / "manifest-x.json").write_text("{}")
    assert manifest_epochs(tmp_path) == [1, 10]
    assert delete_manifest(tmp_path, 10)
    assert not delete_manifest(tmp_path, 10)
    assert complete_epochs(tmp_path) == [1]


def test_manifest_temp_files_are_cleaned(tmp_path: Path) -> None:
    """A manifest temp file left by a crash is removed by the next manifest write."""
    stale = tmp_path / ".manifest-5.json.fedcba9876543210.tmp"
    stale.write_text("{")
    write_epoch(tmp_path, 1)
    assert not stale.exists()
    assert sorted(os.listdir(tmp_path)) == [
        "manifest-1.json",
        "model-1.safetensors",
        "optim-1.safetensors",
    ]


def test_write_manifest_refuses_duplicates(tmp_path: Path) -> None:
    """Each file is listed once."""
    manifest = write_epoch(tmp_path, 1)
    with pytest.raises(ValueError, match="once"):
        write_manifest(tmp_path, 1, [manifest.files[0], manifest.files[0]])


@pytest.mark.timeout(30)  # hashing /dev/zero would never end
def test_listed_file_swapped_for_dev_zero_with_size_zero_is_refused(tmp_path: Path) -> None:
    """The manifest edited to size 0 and the file made a link to /dev/zero (whose size is 0):
    refused as not a regular file, never hashed."""
    write_epoch(tmp_path, 1)
    path = manifest_path(tmp_path, 1)
    document = json.loads(path.read_text())
    document["files"][0]["size"] = 0
    path.write_text(json.dumps(document))
    model = tmp_path / "model-1.safetensors"
    model.unlink()
    model.symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match=rf"{model} is not a regular file"):
        verify_manifest(tmp_path, read_manifest(tmp_path, 1))
    assert latest_complete_epoch(tmp_path) is None


@pytest.mark.timeout(30)
def test_manifest_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    os.mkfifo(manifest_path(tmp_path, 1))
    with pytest.raises(CheckpointError, match=r"manifest-1\.json is not a regular file"):
        read_manifest(tmp_path, 1)


def test_deeply_nested_manifest_is_a_checkpoint_error(tmp_path: Path) -> None:
    """A manifest nested 100,000 deep: CheckpointError naming it, not RecursionError."""
    path = manifest_path(tmp_path, 1)
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=rf"{path} is not valid: .*nested too deeply"):
        read_manifest(tmp_path, 1)
    assert latest_complete_epoch(tmp_path) is None
