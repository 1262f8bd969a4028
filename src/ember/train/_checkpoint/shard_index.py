"""The index of a sharded checkpoint, checked before any of it is used.

A sharded checkpoint's ``model-{e}.safetensors`` and ``optim-{e}.safetensors`` hold no tensor but
an index (``sharded.py``): each tensor's global shape, its dtype and its pieces, each piece in a
shard file at offsets. :func:`read_index` checks an index as the manifests are checked, in one
pass over it (time proportional to its size), and returns :class:`ShardedTensor` values that the
loading code uses as they are; anything else is a :class:`~ember.CheckpointError` naming the index
file:

* **size**: an index file is at most :data:`MAX_INDEX_SIZE` bytes, as its manifest lists it:
  :func:`check_index_size` refuses a bigger one before it is read (its JSON would take seconds
  per hundred megabytes to parse);
* **schema**: ``format`` ``"ember.sharded"``, a ``world`` >= 1 and ``tensors``, a mapping of names
  to ``{"shape": [ints >= 0], "dtype": a torch dtype's name, "shards": [{"file", "offsets",
  "shape"}, ...]}``; each piece's file is a shard file of this epoch
  (``shards-rank{r}-{e}.safetensors`` with r < world) listed in the manifest, and a tensor has at
  most one piece per file (each rank writes one piece of a tensor);
* **shapes against sizes**: every piece is non-empty and lies inside its tensor, the pieces'
  values add up to the tensor's, and the bytes of all pieces in a file fit in the size the
  manifest gives that file. A tensor is thus never larger than the verified files holding it: a
  global shape of [100000, 100000] over a few kilobytes of shards is refused before anything is
  allocated, and an index of a million pieces costs one pass, not a read per piece.

Whether the pieces cover every value they claim to (two pieces could overlap and leave a hole of
the same size) is checked when they are assembled (``sharded.assemble``).
"""

from __future__ import annotations

import functools
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import torch

from ember._errors import CheckpointError
from ember._rundir.manifest import Manifest

__all__ = [
    "MAX_INDEX_SIZE",
    "ShardPiece",
    "ShardedTensor",
    "check_index_size",
    "optimizer_extras",
    "read_index",
]

FORMAT = "ember.sharded"
MAX_INDEX_SIZE = 1 << 25
"""The largest index read (32 MiB: some 400,000 pieces, such as a 300-tensor model's Adam state
over 500 ranks); a bigger one is not an index ember wrote."""
_INDEXES = ("model", "optim")  # the record files that are indexes in a sharded checkpoint
_MAX_DIMS = 64  # more dimensions than any tensor has: a shape list is not a payload


class ShardPiece(NamedTuple):
    """A saved piece of a tensor: the shard file holding it, its offsets in the global tensor
    and its shape. (A named tuple, not a dataclass: an index may hold hundreds of thousands of
    them, and a named tuple is built in 60% of a frozen dataclass's time, measured.)"""

    file: str
    offsets: tuple[int, ...]
    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ShardedTensor:
    """A tensor of a sharded checkpoint: its global shape, its dtype and its pieces."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    pieces: tuple[ShardPiece, ...]


@functools.cache
def _dtypes() -> dict[str, torch.dtype]:
    """torch's dtypes by the names an index writes (``"float32"``, ``"bfloat16"``)."""
    found = (value for value in vars(torch).values() if isinstance(value, torch.dtype))
    return {str(dtype).removeprefix("torch."): dtype for dtype in found}


def read_index(
    path: Path, metadata: Mapping[str, Any], manifest: Manifest
) -> dict[str, ShardedTensor]:
    """The tensors of the index in ``metadata`` (the record of the index file ``path``), each
    checked against ``manifest`` (see the module doc); CheckpointError naming ``path``."""
    _check_size(path, manifest)
    if metadata.get("format") != FORMAT:
        _refuse(path, f"its format is {metadata.get('format')!r}, expected {FORMAT!r}")
    world = metadata.get("world")
    if not isinstance(world, int) or isinstance(world, bool) or world < 1:
        _refuse(path, f"its world is {world!r}, expected an int >= 1")
    tensors = metadata.get("tensors")
    if not isinstance(tensors, dict):
        _refuse(path, "it has no mapping of tensors")
    shards = _shard_sizes(manifest, world)
    used = dict.fromkeys(shards, 0)  # bytes of the pieces in each file so far
    index = {}
    for name, entry in tensors.items():
        try:
            index[name] = _tensor(entry, shards, used)
        except ValueError as error:
            _refuse(path, f"tensor {name!r}: {error}")
    for file, size in used.items():
        if size > shards[file]:
            _refuse(path, f"its pieces in {file} are {size} bytes, the file {shards[file]} bytes")
    return index


def check_index_size(directory: Path, manifest: Manifest, name: str) -> None:
    """Before the record file ``name`` (``"model"``, ``"state"``...) of ``manifest``'s epoch is
    read: in a sharded checkpoint (its manifest lists shard files) the model and optimizer files
    are indexes, refused when the manifest gives one more than :data:`MAX_INDEX_SIZE` bytes."""
    if name in _INDEXES and _shard_sizes(manifest, world=sys.maxsize):
        _check_size(directory / f"{name}-{manifest.epoch}.safetensors", manifest)


def _check_size(path: Path, manifest: Manifest) -> None:
    listed = manifest.file(path.name)
    if listed is not None and listed.size > MAX_INDEX_SIZE:
        _refuse(path, f"it is {listed.size} bytes, more than {MAX_INDEX_SIZE}")


def _refuse(path: Path, problem: str) -> NoReturn:
    raise CheckpointError(f"the sharded checkpoint index {path} is not valid: {problem}")


def _shard_sizes(manifest: Manifest, world: int) -> dict[str, int]:
    """The size of every shard file of ``manifest``'s epoch for ranks below ``world``."""
    pattern = re.compile(rf"shards-rank(0|[1-9][0-9]*)-{manifest.epoch}\.safetensors")
    sizes = {}
    for entry in manifest.files:
        match = pattern.fullmatch(entry.name)
        if match is not None and int(match.group(1)) < world:
            sizes[entry.name] = entry.size
    return sizes


def _tensor(entry: object, shards: Mapping[str, int], used: dict[str, int]) -> ShardedTensor:
    """One tensor's entry, checked (ValueError saying what is wrong); its pieces' bytes are
    added to ``used``."""
    if not isinstance(entry, dict):
        raise ValueError(f"its entry is {type(entry).__name__}, not a mapping")
    shape = _shape(entry.get("shape"), "shape", minimum=0)
    dtype = _dtypes().get(entry["dtype"]) if isinstance(entry.get("dtype"), str) else None
    if dtype is None:
        raise ValueError(f"its dtype {entry.get('dtype')!r} is not a torch dtype")
    pieces = entry.get("shards")
    if not isinstance(pieces, list):
        raise ValueError("it has no list of shards")
    if len(pieces) > len(shards):  # each rank writes one piece of a tensor, in its own file
        raise ValueError(f"it has {len(pieces)} pieces, the manifest {len(shards)} shard files")
    checked = tuple(_piece(piece, shape) for piece in pieces)
    if len({piece.file for piece in checked}) != len(checked):
        raise ValueError("it has two pieces in one shard file")
    values = sum(math.prod(piece.shape) for piece in checked)
    if values != math.prod(shape):
        raise ValueError(
            f"its pieces hold {values} values, its shape {list(shape)} {math.prod(shape)}"
        )
    for piece in checked:
        if piece.file not in shards:
            raise ValueError(f"its piece is in {piece.file!r}, not a shard file of the manifest")
        used[piece.file] += math.prod(piece.shape) * dtype.itemsize
    return ShardedTensor(shape, dtype, checked)


def _piece(piece: object, shape: tuple[int, ...]) -> ShardPiece:
    """``piece`` checked to lie inside a tensor of ``shape``: the common case in one loop (an
    index may hold millions), the message from :func:`_piece_problem`."""
    if type(piece) is dict:
        file, offsets, extent = piece.get("file"), piece.get("offsets"), piece.get("shape")
        if (
            type(file) is str
            and type(offsets) is list
            and type(extent) is list
            and len(offsets) == len(extent) == len(shape)
            and all(
                type(o) is int and type(e) is int and o >= 0 and e >= 1 and o + e <= s
                for o, e, s in zip(offsets, extent, shape, strict=True)
            )
        ):
            return ShardPiece(file, tuple(offsets), tuple(extent))
    raise ValueError(_piece_problem(piece, shape))


def _piece_problem(piece: object, shape: tuple[int, ...]) -> str:
    """What is wrong with a piece that :func:`_piece` refused."""
    if not isinstance(piece, dict) or not isinstance(piece.get("file"), str):
        return f"a piece is not a mapping with a file: {str(piece)[:200]}"
    try:
        offsets = _shape(piece.get("offsets"), "offsets", minimum=0)
        extent = _shape(piece.get("shape"), "piece shape", minimum=1)
    except ValueError as error:
        return f"its piece in {piece['file']!r}: {error}"
    if len(offsets) != len(shape) or len(extent) != len(shape):
        return (
            f"its piece in {piece['file']!r} has offsets {list(offsets)} and shape "
            f"{list(extent)}, the tensor {len(shape)} dimensions"
        )
    return (
        f"its piece in {piece['file']!r} at offsets {list(offsets)} of shape {list(extent)} "
        f"lies outside its shape {list(shape)}"
    )


def _shape(value: object, what: str, *, minimum: int) -> tuple[int, ...]:
    """``value`` as a tuple of ints >= ``minimum``; ValueError naming ``what``."""
    if (
        not isinstance(value, list)
        or len(value) > _MAX_DIMS
        or not all(_is_int(n) and n >= minimum for n in value)
    ):
        raise ValueError(
            f"its {what} is {str(value)[:200]}, expected a list of at most {_MAX_DIMS} ints "
            f">= {minimum}"
        )
    return tuple(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def optimizer_extras(
    path: Path, metadata: Mapping[str, Any]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The optimizer index's param groups (each with its parameters' names) and its non-tensor
    state values by parameter; CheckpointError naming ``path`` when they are not so."""
    groups = metadata.get("param_groups")
    if not isinstance(groups, list) or not all(
        isinstance(group, dict)
        and isinstance(group.get("params"), list)
        and all(isinstance(name, str) for name in group["params"])
        for group in groups
    ):
        _refuse(path, "it has no list of param groups, each with a list of parameter names")
    values = metadata.get("values", {})
    if not isinstance(values, dict) or not all(isinstance(v, dict) for v in values.values()):
        _refuse(path, "its non-tensor values are not a mapping of parameters to mappings")
    return groups, values
