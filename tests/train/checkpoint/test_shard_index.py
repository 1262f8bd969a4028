"""A sharded checkpoint's index is checked before use: a hostile or damaged one is a
CheckpointError naming the file, never a raw error, a huge allocation or a minute of work."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember import CheckpointError
from ember._rundir.atomic import CheckpointFile
from ember._rundir.manifest import epoch_problem, read_manifest, write_manifest
from ember.train import KeepLastNCheckpoints, export_weights, load_checkpoint
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.record import Record

WORLD = 2


def weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {name: t.detach().clone() for name, t in nn.Linear(4, 6).state_dict().items()}


def write_sharded(
    directory: Path,
    edit: Callable[[dict[str, Any]], None] = lambda index: None,
    shard_bytes: dict[int, bytes] | None = None,
) -> Path:
    """A sharded checkpoint of epoch 1 of ``nn.Linear(4, 6)`` as a two-rank FSDP run writes
    it (each tensor split on dim 0, rank r's halves in its shard file), its index changed by
    ``edit`` and a shard file's bytes replaced as ``shard_bytes`` says; the manifest lists
    every file as it is, so the files verify and only the index or the shard is at fault."""
    directory.mkdir(parents=True, exist_ok=True)
    files: list[CheckpointFile] = []
    index: dict[str, Any] = {"format": "ember.sharded", "world": WORLD, "tensors": {}}
    shards: dict[int, dict[str, torch.Tensor]] = {rank: {} for rank in range(WORLD)}
    for name, tensor in weights().items():
        entry: dict[str, Any] = {"shape": list(tensor.shape), "dtype": "float32", "shards": []}
        start = 0
        for rank, piece in enumerate(torch.chunk(tensor, WORLD)):
            shards[rank][f"model/{name}"] = piece.clone()
            offsets = [start] + [0] * (tensor.dim() - 1)
            shard_file = f"shards-rank{rank}-1.safetensors"
            entry["shards"].append(
                {"file": shard_file, "offsets": offsets, "shape": list(piece.shape)}
            )
            start += piece.shape[0]
        index["tensors"][name] = entry
    for rank, tensors in shards.items():
        metadata = {"format": "ember.shards", "epoch": 1, "rank": rank}
        shard = FileCheckpointer(directory, f"shards-rank{rank}")
        written = shard.save(1, Record(tensors=tensors, metadata=metadata))
        if shard_bytes is not None and rank in shard_bytes:
            data = shard_bytes[rank]
            shard.path(1).write_bytes(data)
            written = CheckpointFile(written.name, len(data), hashlib.sha256(data).hexdigest())
        files.append(written)
    edit(index)
    files.append(FileCheckpointer(directory, "model").save(1, Record(metadata=index)))
    write_manifest(directory, 1, files)
    return directory / "model-1.safetensors"


def test_a_sharded_checkpoint_written_by_hand_loads(tmp_path: Path) -> None:
    """The helper's checkpoint is valid: load_checkpoint reassembles the weights."""
    write_sharded(tmp_path)
    model = load_checkpoint(tmp_path, 1, into=nn.Linear(4, 6))
    for name, tensor in weights().items():
        assert torch.equal(model.state_dict()[name], tensor)


def set_piece(key: str, value: Any, piece: int = 0) -> Callable[[dict[str, Any]], None]:
    def edit(index: dict[str, Any]) -> None:
        index["tensors"]["weight"]["shards"][piece][key] = value

    return edit


def set_entry(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(index: dict[str, Any]) -> None:
        index["tensors"]["weight"][key] = value

    return edit


def set_index(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(index: dict[str, Any]) -> None:
        index[key] = value

    return edit


HOSTILE = {
    "string offsets": (set_piece("offsets", ["0", "0"]), r"offsets is \['0', '0'\]"),
    "unknown dtype": (set_entry("dtype", "float99"), "dtype 'float99' is not a torch dtype"),
    "a torch attribute as dtype": (set_entry("dtype", "nn"), "dtype 'nn' is not a torch dtype"),
    "a huge global shape": (
        set_entry("shape", [100000, 100000]),
        r"pieces hold 24 values, its shape \[100000, 100000\] 10000000000",
    ),
    "a piece outside its tensor": (set_piece("offsets", [5, 0], 1), "lies outside its shape"),
    "a piece of too many values": (
        set_piece("shape", [600, 4], 1),
        r"lies outside its shape|pieces hold",
    ),
    "a bool for an int": (set_index("world", True), "its world is True"),
    "no tensors": (set_index("tensors", ["weight"]), "it has no mapping of tensors"),
    "pieces not a list": (set_entry("shards", "all"), "it has no list of shards"),
    "a piece not a mapping": (set_entry("shards", [1, 2]), "a piece is not a mapping"),
    "a file not in the manifest": (
        set_piece("file", "shards-rank7-1.safetensors"),
        "'shards-rank7-1.safetensors', not a shard file of the manifest",
    ),
    "a path as file": (set_piece("file", "../model-1.safetensors"), "not a shard file"),
    "two pieces in one file": (
        set_piece("file", "shards-rank0-1.safetensors", 1),
        "two pieces in one shard file",
    ),
    "deep nesting": (set_entry("shape", [[[[[[1]]]]]]), "its shape is"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_index_is_refused_naming_its_file(tmp_path: Path, case: str) -> None:
    """Issue 29, item 4: each hostile index is a CheckpointError naming model-1.safetensors
    (before: TypeError, AttributeError, RuntimeError naming no file, or a 40 GB allocation),
    from load_checkpoint and export_weights alike, and nothing is exported."""
    edit, message = HOSTILE[case]
    index_file = write_sharded(tmp_path / "run", edit)
    with pytest.raises(CheckpointError, match=message) as raised:
        load_checkpoint(tmp_path / "run", 1, into=nn.Linear(4, 6))
    assert f"the sharded checkpoint index {index_file} is not valid" in str(raised.value)
    with pytest.raises(CheckpointError, match=message):
        export_weights(tmp_path / "run", tmp_path / "out.safetensors", 1)
    assert not (tmp_path / "out.safetensors").exists()


def test_a_piece_of_the_wrong_shape_in_its_shard_is_named(tmp_path: Path) -> None:
    """The index says [3, 4] for rank 1's piece; the shard file holds a [3, 5] tensor there (a
    file of another model): CheckpointError naming the shard file and both shapes."""
    good = tmp_path / "good"
    write_sharded(good)
    other = FileCheckpointer(tmp_path / "other", "shards-rank1")
    tensors = {"model/weight": torch.zeros(3, 5), "model/bias": torch.zeros(3)}
    other.save(1, Record(tensors=tensors, metadata={"format": "ember.shards"}))
    write_sharded(tmp_path / "run", shard_bytes={1: other.path(1).read_bytes()})
    shard = tmp_path / "run" / "shards-rank1-1.safetensors"
    with pytest.raises(
        CheckpointError, match=rf"shard file {shard} holds 'model/weight' as \[3, 5\] float32"
    ):
        load_checkpoint(tmp_path / "run", 1, into=nn.Linear(4, 6))


def test_a_shard_that_is_not_safetensors_is_named(tmp_path: Path) -> None:
    """Rank 0's shard file is replaced by a zip archive's bytes (torch.save's format; listed as
    they are in the manifest, so they verify): CheckpointError naming the shard file, not
    safetensors' own error."""
    write_sharded(tmp_path, shard_bytes={0: b"PK\x03\x04" + bytes(60)})
    shard = tmp_path / "shards-rank0-1.safetensors"
    with pytest.raises(CheckpointError, match=f"checkpoint file {shard} .*not a safetensors"):
        load_checkpoint(tmp_path, 1, into=nn.Linear(4, 6))


def test_overlapping_pieces_that_leave_a_hole_are_refused(tmp_path: Path) -> None:
    """Two pieces at the same offsets (their values adding up to the tensor's) leave its second
    half unwritten: refused as uncovered, never returned as uninitialised memory."""

    def overlap(index: dict[str, Any]) -> None:
        for entry in index["tensors"].values():
            entry["shards"][1]["offsets"] = [0] * len(entry["shape"])

    write_sharded(tmp_path, overlap)
    with pytest.raises(
        CheckpointError, match="misses shards of 'weight': its pieces cover 12 of the 24 values"
    ):
        load_checkpoint(tmp_path, 1, into=nn.Linear(4, 6))


def test_a_million_piece_index_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    """Issue 29, item 4: an index of 1,000,000 one-value pieces (77 MB, a valid file listed in
    its manifest) is refused by its size, naming it, before its JSON is parsed (before: over
    40 s of parsing, reads and copies)."""
    directory = tmp_path / "run"
    index_file = write_sharded(directory)
    pieces = ",".join(
        f'{{"file":"shards-rank0-1.safetensors","offsets":[{i}],"shape":[1]}}'
        for i in range(1_000_000)
    )
    index = (
        '{"format":"ember.sharded","world":2,"tensors":{"bias":{"shape":[1000000],'
        f'"dtype":"float32","shards":[{pieces}]}}}}}}'
    )
    document = (
        f'{{"format":"ember.checkpoint","version":1,"name":"model","epoch":1,"metadata":{index}}}'
    )
    header = json.dumps({"__metadata__": {"ember": document}}).encode()
    header += b" " * (-len(header) % 8)
    index_file.write_bytes(len(header).to_bytes(8, "little") + header)
    files = [f for f in read_manifest(directory, 1).files if f.name != index_file.name]
    data = index_file.read_bytes()
    files.append(CheckpointFile(index_file.name, len(data), hashlib.sha256(data).hexdigest()))
    write_manifest(directory, 1, files)
    assert epoch_problem(directory, 1) is None  # every file verifies against the manifest
    refused = f"{index_file} is not valid: it is 7[0-9]{{7}} bytes"
    with pytest.raises(CheckpointError, match=refused):
        export_weights(directory, tmp_path / "out.safetensors", 1)
    with pytest.raises(CheckpointError, match=refused):
        LearningCheckpointer(directory, KeepLastNCheckpoints(2)).restore(1)


def test_the_index_size_is_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index file larger than the cap is refused before its entries are looked at."""
    from ember.train._checkpoint import shard_index

    index_file = write_sharded(tmp_path)
    monkeypatch.setattr(shard_index, "MAX_INDEX_SIZE", index_file.stat().st_size - 1)
    with pytest.raises(CheckpointError, match=f"{index_file} is not valid: it is .* bytes, more"):
        load_checkpoint(tmp_path, 1, into=nn.Linear(4, 6))
