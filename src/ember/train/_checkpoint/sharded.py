"""Sharded checkpoints without pickle: every rank writes its own shards, rank 0 the index.

torch's distributed checkpoint (DCP) writes its metadata with pickle, so ember neither writes
nor loads DCP files. Under ``FullyShardedDataParallel`` an epoch's checkpoint is::

    shards-rank{r}-{e}.safetensors   rank r's local pieces of the model's and the optimizer's
                                     DTensors (a piece replicated on several ranks, and every
                                     plain tensor, is written once: by the first replica, rank 0)
    model-{e}.safetensors            the index of the model's tensors (JSON, no tensor):
                                     {"format": "ember.sharded", "world": 2, "tensors": {name:
                                      {"shape": [global], "dtype": "float32", "shards": [
                                       {"file": "shards-rank1-3.safetensors", "offsets": [5, 0],
                                        "shape": [5, 4]}, ...]}}}
    optim-{e}.safetensors            the index of the optimizer's state, its param groups (by
                                     parameter name) and its non-tensor values
    manifest-{e}.json                every file above with its size and SHA-256; written last

The commit is atomic across ranks: each rank writes its shard file (atomically) and reports
its name, size, SHA-256 and pieces to rank 0 (:func:`write_shards`); rank 0 then writes the
index records and the manifest through its :class:`~ember.train.LearningCheckpointer`. A rank
that dies before reporting fails the gather: no manifest, and the previous epoch stays the
newest complete one.

Loading (:func:`load_shards`) fills each tensor's local region, whatever mesh wrote it: with the
same world size a rank reads its own pieces back (bit-identical); with another it reassembles
the pieces overlapping its region (from every file, so the model must fit in host memory) and
reshards. A plain model (one process, no FSDP) gets the whole tensors. Every file is verified
against the manifest and the index checked (``shard_index.py``) first; a region no piece covers
(a missing shard) or a tensor the model does not have is a :class:`~ember.CheckpointError`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import torch
from torch import nn

from ember._errors import CheckpointError
from ember._rundir.atomic import CheckpointFile
from ember._rundir.checkpoints import (
    MAX_FILE_SIZE,
    SUFFIX,
    checkpoint_file_name,
    read_regular,
    verify_bytes,
)
from ember._rundir.manifest import Manifest, manifest_path, read_manifest
from ember.train._checkpoint.file import FileCheckpointer, deserialize
from ember.train._checkpoint.record import (
    TRANSFORMERS_CONFIG,
    TRANSFORMERS_GENERATION_CONFIG,
    Record,
    snapshot,
    transformers_metadata,
)
from ember.train._checkpoint.shard_index import FORMAT, ShardPiece, optimizer_extras, read_index
from ember.train._learner import Learner

__all__ = [
    "ShardedRecords",
    "ShardingRun",
    "assemble",
    "consolidate",
    "delete_shards",
    "has_shards",
    "is_sharded",
    "load_shards",
    "write_shards",
]


@dataclass(frozen=True, slots=True)
class ShardedRecords:
    """What rank 0 checkpoints for a sharded model: the two index records and every rank's
    shard file (listed in the manifest)."""

    model: Record
    optim: Record
    files: tuple[CheckpointFile, ...]


@runtime_checkable
class ShardingRun(Protocol):
    """A strategy run whose model is sharded: every rank takes part in each checkpoint."""

    def write_shards(
        self, directory: Path, epoch: int, learner: Learner[Any]
    ) -> ShardedRecords | None:
        """Write this rank's shards of the model and ``learner``'s optimizer; rank 0 gets the
        records, the others None."""
        ...


class _Gatherer(Protocol):
    @property
    def rank(self) -> int: ...

    def gather(self, value: Any) -> list[Any] | None: ...


def shard_name(rank: int) -> str:
    """The file-name stem of ``rank``'s shards."""
    return f"shards-rank{rank}"


def is_sharded(record: Record) -> bool:
    """Whether a model or optimizer record is a sharded checkpoint's index."""
    return record.metadata.get("format") == FORMAT


# --- writing -------------------------------------------------------------------------------------


def write_shards(
    directory: Path, epoch: int, learner: Learner[Any], run: _Gatherer
) -> ShardedRecords | None:
    """Write this rank's pieces of the model and the optimizer (see the module doc), gather
    every rank's report on rank 0 and return the index records there (None elsewhere)."""
    optim = _single_optimizer(learner)
    model_state, optim_state = _states(learner.model, optim)
    tensors: dict[str, torch.Tensor] = {}
    pieces: dict[str, dict[str, Any]] = {}
    values: dict[str, Any] = {}
    flat = {f"model/{name}": value for name, value in model_state.items()}
    for param, state in optim_state["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                flat[f"optim/{param}/{key}"] = value
            else:
                values.setdefault(param, {})[key] = value
    for name, value in flat.items():
        piece = _local_piece(value, run.rank)
        if piece is not None:
            local, offsets = piece
            tensors[name] = snapshot(local)
            pieces[name] = {"offsets": offsets, "shape": list(local.shape)}
    file = FileCheckpointer(directory, shard_name(run.rank))
    metadata = {"format": "ember.shards", "epoch": epoch, "rank": run.rank}
    written = file.save(epoch, Record(tensors=tensors, metadata=metadata))
    shapes = {
        name: [list(value.shape), str(value.dtype).removeprefix("torch.")]
        for name, value in flat.items()
    }
    reports = run.gather({"file": [written.name, written.size, written.sha256], "pieces": pieces})
    if reports is None:
        return None
    index: dict[str, dict[str, Any]] = {
        name: {"shape": shape, "dtype": dtype, "shards": []}
        for name, (shape, dtype) in shapes.items()
    }
    for report in reports:
        for name, piece in report["pieces"].items():
            index[name]["shards"].append({"file": report["file"][0], **piece})
    groups = [_json_group(group) for group in optim_state["param_groups"]]
    model = {k.removeprefix("model/"): v for k, v in index.items() if k.startswith("model/")}
    optimizer = {k.removeprefix("optim/"): v for k, v in index.items() if k.startswith("optim/")}
    extra = transformers_metadata(learner.model)  # kept for an export (pretrained.py)
    return ShardedRecords(
        Record(metadata={"format": FORMAT, "world": len(reports), "tensors": model, **extra}),
        Record(
            metadata={
                "format": FORMAT,
                "world": len(reports),
                "tensors": optimizer,
                "param_groups": groups,
                "values": values,
            }
        ),
        tuple(CheckpointFile(*report["file"]) for report in reports),
    )


def _states(
    model: nn.Module, optim: torch.optim.Optimizer
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model's and the optimizer's states, keyed by parameter name, DTensors unsharded."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    options = StateDictOptions(full_state_dict=False)
    model_state, optim_state = get_state_dict(model, optim, options=options)
    return dict(model_state), cast(dict[str, Any], optim_state)


def _single_optimizer(learner: Learner[Any]) -> torch.optim.Optimizer:
    if learner.several_optimizers:
        raise CheckpointError(
            f"sharded checkpoints hold one optimizer; this learner has {sorted(learner.optimizers)}"
        )
    return learner.optimizer


def _local_piece(value: torch.Tensor, rank: int) -> tuple[torch.Tensor, list[int]] | None:
    """This rank's piece of ``value`` and its offsets in the global tensor, or None when
    another rank writes it (a replica's) or it is empty."""
    from torch.distributed.tensor import DTensor, Replicate
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if isinstance(value, DTensor):
        mesh = value.device_mesh
        coordinate = list(mesh.get_coordinate() or ())
        replicas = [i for i, p in enumerate(value.placements) if isinstance(p, Replicate)]
        if any(coordinate[i] != 0 for i in replicas):
            return None  # the first replica writes it
        shape, offsets = compute_local_shape_and_global_offset(value.shape, mesh, value.placements)
        local = value.to_local()
        assert tuple(local.shape) == tuple(shape)
    else:
        if rank != 0:
            return None
        local, offsets = value, (0,) * value.dim()
    if local.numel() == 0:
        return None
    return local, list(offsets)


def _json_group(group: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in group.items()}


def delete_shards(directory: Path, epoch: int) -> None:
    """Remove every rank's shard file of ``epoch`` (after its manifest is gone)."""
    for path in directory.glob(f"shards-rank*-{epoch}.safetensors"):
        path.unlink(missing_ok=True)


# --- reading -------------------------------------------------------------------------------------


class _Pieces:
    """A sharded checkpoint's index, checked against the manifest (``shard_index.py``), and its
    shard files, each verified against the manifest and read once, when a region first needs
    it."""

    def __init__(
        self, directory: Path, epoch: int, record: Record, name: str, manifest: Manifest | None
    ) -> None:
        self._prefix = f"{name}/"  # the tensors' keys in the shard files: "model/…", "optim/…"
        self._directory = directory
        self._epoch = epoch
        self._files: dict[str, dict[str, torch.Tensor]] = {}
        self._manifest = read_manifest(directory, epoch) if manifest is None else manifest
        self.path = directory / checkpoint_file_name(name, epoch)
        self._index = read_index(self.path, record.metadata, self._manifest)

    def names(self) -> list[str]:
        return list(self._index)

    def shape(self, name: str) -> list[int]:
        return list(self._index[name].shape)

    def fill(self, name: str, like: torch.Tensor | None) -> torch.Tensor:
        """The region of tensor ``name`` that ``like`` (a DTensor: its local shard; a plain
        tensor or None: the whole tensor) holds, assembled from the pieces overlapping it."""
        from torch.distributed.tensor import DTensor
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        entry = self._index[name]
        shape = entry.shape
        if like is not None and tuple(like.shape) != shape:
            raise CheckpointError(
                f"{name!r} does not fit: the checkpoint of epoch {self._epoch} holds shape "
                f"{list(shape)}, the model has {list(like.shape)}"
            )
        if isinstance(like, DTensor):
            local, offsets = compute_local_shape_and_global_offset(
                like.shape, like.device_mesh, like.placements
            )
        else:
            local, offsets = shape, (0,) * len(shape)
        key = self._prefix + name
        pieces = [
            (piece.offsets, piece.shape, functools.partial(self._tensor, piece, entry.dtype, key))
            for piece in entry.pieces
        ]
        out, covered = assemble(offsets, local, entry.dtype, pieces)
        if covered != out.numel():
            raise CheckpointError(
                f"the sharded checkpoint of epoch {self._epoch} in {self._directory} misses "
                f"shards of {name!r}: its pieces cover {covered} of the {out.numel()} values "
                "this rank needs (a shard file missing from the index, or pieces that overlap?)"
            )
        return out

    def _tensor(self, piece: ShardPiece, dtype: torch.dtype, name: str) -> torch.Tensor:
        """The tensor of ``piece`` in its shard file, which must have the piece's shape and
        ``dtype``."""
        path = self._directory / piece.file
        tensors = self._files.get(piece.file)
        if tensors is None:
            tensors = self._files[piece.file] = self._read(piece.file)
        tensor = tensors.get(name)
        if tensor is None:
            raise CheckpointError(f"shard file {path} has no tensor {name!r}")
        if tuple(tensor.shape) != piece.shape or tensor.dtype != dtype:
            raise CheckpointError(
                f"shard file {path} holds {name!r} as {list(tensor.shape)} "
                f"{str(tensor.dtype).removeprefix('torch.')}, its index "
                f"{self.path.name} says {list(piece.shape)} {str(dtype).removeprefix('torch.')}"
            )
        return tensor

    def _read(self, file: str) -> dict[str, torch.Tensor]:
        """The tensors of shard file ``file``, verified against the manifest."""
        expected = self._manifest.file(file)
        where = manifest_path(self._directory, self._epoch)
        if expected is None:
            raise CheckpointError(f"checkpoint manifest {where} does not list shard {file}")
        path = self._directory / file
        if not path.exists():
            raise CheckpointError(f"shard file {path} (listed in {where.name}) is missing")
        data = read_regular(path, "checkpoint shard", expected.size, limit=MAX_FILE_SIZE)
        verify_bytes(path, data, expected)
        stem = file.removesuffix(f"-{self._epoch}{SUFFIX}")
        return deserialize(data, path, stem, self._epoch).tensors


Piece = tuple[Sequence[int], Sequence[int], Callable[[], torch.Tensor]]
"""A saved piece: its offsets in the global tensor, its shape, and how to read it."""


def assemble(
    offsets: Sequence[int], shape: Sequence[int], dtype: torch.dtype, pieces: Iterable[Piece]
) -> tuple[torch.Tensor, int]:
    """The region at ``offsets`` of ``shape`` of a global tensor, copied from the ``pieces``
    that overlap it (only those are read), and how many of its values they covered (each
    counted once: two overlapping pieces cannot hide a hole of their overlap's size)."""
    out = torch.empty(tuple(shape), dtype=dtype)
    covered = torch.zeros(tuple(shape), dtype=torch.bool)
    for their_offsets, their_shape, read in pieces:
        overlap = _overlap(offsets, shape, their_offsets, their_shape)
        if overlap is not None:
            mine, theirs = overlap
            out[mine] = read()[theirs]
            covered[mine] = True
    return out, int(covered.sum())


def _overlap(
    offsets: Sequence[int],
    shape: Sequence[int],
    their_offsets: Sequence[int],
    their_shape: Sequence[int],
) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
    """The slices of the overlap of two regions, in each region's own coordinates."""
    mine, theirs = [], []
    for start, size, other, other_size in zip(
        offsets, shape, their_offsets, their_shape, strict=True
    ):
        low, high = max(start, other), min(start + size, other + other_size)
        if high <= low:
            return None
        mine.append(slice(low - start, high - start))
        theirs.append(slice(low - other, high - other))
    return tuple(mine), tuple(theirs)


def _like(template: torch.Tensor, local: torch.Tensor) -> torch.Tensor:
    """``local`` placed as ``template`` is: a DTensor shard on its mesh, or a plain tensor."""
    from torch.distributed.tensor import DTensor

    local = local.to(template.device)
    if isinstance(template, DTensor):
        return DTensor.from_local(
            local,
            template.device_mesh,
            template.placements,
            run_check=False,
            shape=template.shape,
            stride=template.stride(),
        )
    return local


def load_shards(
    directory: Path,
    epoch: int,
    learner: Learner[Any],
    model_record: Record,
    optim_record: Record,
    manifest: Manifest | None = None,
) -> None:
    """Load a sharded checkpoint's model and optimizer into ``learner`` (sharded or not), each
    rank its own regions (see the module doc). Both indexes are checked before anything is
    read (``shard_index.py``), against the epoch's ``manifest`` (read here when not given: a
    resume hands over the one it verified)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

    optim = _single_optimizer(learner)
    model_state, _ = _states(learner.model, optim)
    model = _Pieces(directory, epoch, model_record, "model", manifest)
    pieces = _Pieces(directory, epoch, optim_record, "optim", manifest)
    groups, values = optimizer_extras(pieces.path, optim_record.metadata)
    _check_names(model.names(), model_state, epoch)
    loaded = {name: _like(target, model.fill(name, target)) for name, target in model_state.items()}
    state = _optimizer_state(pieces, model_state, epoch)
    for param, extra in values.items():
        state.setdefault(param, {}).update(extra)
    try:
        set_state_dict(
            learner.model,
            optim,
            model_state_dict=cast(Any, loaded),
            optim_state_dict=cast(Any, {"state": state, "param_groups": groups}),
            options=StateDictOptions(full_state_dict=False),
        )
    except (RuntimeError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(
            f"the sharded checkpoint of epoch {epoch} in {directory} does not fit the model or "
            f"its optimizer: {error}"
        ) from error


def _optimizer_state(
    pieces: _Pieces, model_state: Mapping[str, Any], epoch: int
) -> dict[str, dict[str, Any]]:
    """The optimizer's tensor state by parameter name, each tensor placed as its parameter is
    (a DTensor shard when it has the parameter's shape, else whole on its device)."""
    from torch.distributed.tensor import DTensor

    state: dict[str, dict[str, Any]] = {}
    for key in pieces.names():
        param, _, field = key.rpartition("/")
        if param not in model_state:
            raise CheckpointError(
                f"the optimizer state of epoch {epoch} is for parameter {param!r}, which the "
                "model does not have"
            )
        target = model_state[param]
        sharded = isinstance(target, DTensor) and pieces.shape(key) == list(target.shape)
        region = pieces.fill(key, target if sharded else None)
        state.setdefault(param, {})[field] = (
            _like(target, region) if sharded else region.to(target.device)
        )
    return state


def _check_names(names: list[str], model_state: Mapping[str, Any], epoch: int) -> None:
    missing = sorted(set(model_state) - set(names))
    unexpected = sorted(set(names) - set(model_state))
    if missing or unexpected:
        raise CheckpointError(
            f"the sharded checkpoint of epoch {epoch} holds another model: missing {missing}, "
            f"unexpected {unexpected}"
        )


def consolidate(directory: Path, epoch: int, record: Record) -> Record:
    """The whole tensors of a sharded model record, as a plain model record (for export; a
    ``transformers`` model's configurations kept)."""
    pieces = _Pieces(directory, epoch, record, "model", None)
    kept = (TRANSFORMERS_CONFIG, TRANSFORMERS_GENERATION_CONFIG)
    return Record(
        tensors={name: pieces.fill(name, None) for name in pieces.names()},
        metadata={key: value for key, value in record.metadata.items() if key in kept},
    )


def has_shards(module: nn.Module) -> bool:
    """Whether ``module`` has sharded (DTensor) parameters."""
    module_of_dtensor = sys.modules.get("torch.distributed.tensor")
    if module_of_dtensor is None:  # not imported (it costs a second): no tensor is a DTensor
        return False
    dtensor = module_of_dtensor.DTensor
    return any(isinstance(param, dtensor) for param in module.parameters())
