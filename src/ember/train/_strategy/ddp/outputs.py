"""Per-rank outputs to rank 0's global batch for ``DistributedDataParallel``.

After every chunk of units (``DistributedDataParallel(report_every=...)`` batches, and at the
end of a pass), :func:`exchange_outputs` sends each rank's outputs of the chunk to rank 0
(together with every rank's stop wish, so that one exchange serves both). Outputs travel as
the tensor fields of a dataclass: tensors only, never pickle. Rank 0 emits its own output when
no other rank has one, else the ranks' parts, merged in rank order on the metrics thread (where
outputs' ``sync`` runs), not in the training loop.

A merge function turns the parts into the global batch's output: the built-in outputs
concatenate ``output``/``logits``/``targets`` and average a scalar ``loss`` weighted by the
shares; a user-defined type brings a ``merge(parts, sizes)`` classmethod or registers one with
:func:`register_output_merge`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import torch
import torch.distributed as dist

from ember.train._outputs import (
    ClassificationOutput,
    MultiLabelClassificationOutput,
    RegressionOutput,
    SequenceOutput,
    synced,
)
from ember.train._strategy.collectives import (
    collective,
    pack_into,
    payload_size,
    tensor_header,
    unpack_tensors,
)
from ember.train._strategy.ddp.progress import ProgressWatch
from ember.train._strategy.ddp.ranks import Ranks

__all__ = ["exchange_outputs", "merge_outputs", "register_output_merge"]

OutputT = TypeVar("OutputT")
Merge = Callable[[Sequence[Any], Sequence[int]], Any]
_HEADER = 64  # int64 numbers per unit and rank: its output's bytes and tensor header


# --- merging ---------------------------------------------------------------------------------

_MERGES: dict[type, Merge] = {}


@runtime_checkable
class MergeableOutput(Protocol):
    """An output type that joins its ranks' parts itself (a dataclass with tensor fields)."""

    @classmethod
    def merge(cls, parts: Sequence[Any], sizes: Sequence[int]) -> Any:
        """The global batch's output from the ranks' ``parts`` and their share ``sizes``."""
        ...


def register_output_merge(output_type: type[OutputT]) -> Callable[[Merge], Merge]:
    """Register ``fn(parts, sizes) -> output`` merging the ranks' outputs of ``output_type``.

    ``parts`` are the outputs of the ranks with a non-empty share, in rank order, and ``sizes``
    their share sizes; the result stands for the global batch. A ``merge`` classmethod on the
    type does the same without registering.
    """

    def register(fn: Merge) -> Merge:
        _MERGES[output_type] = fn
        _FOUND.clear()
        return fn

    return register


_FOUND: dict[type, Merge] = {}  # each output type's merge, once found (per batch otherwise)


def _merge_for(output_type: type) -> Merge:
    found = _FOUND.get(output_type)
    if found is None:
        found = _FOUND[output_type] = _find_merge(output_type)
    return found


def _find_merge(output_type: type) -> Merge:
    for kind in output_type.__mro__:
        if kind in _MERGES:
            return _MERGES[kind]
    if issubclass(output_type, MergeableOutput) and dataclasses.is_dataclass(output_type):
        return output_type.merge
    raise TypeError(
        f"DistributedDataParallel cannot reduce outputs of type {output_type.__name__} to rank 0: "
        "make it a dataclass whose tensor fields hold the batch's values and give it a "
        "merge(parts, sizes) classmethod, or register one with register_output_merge"
    )


def merge_outputs(parts: Sequence[OutputT], sizes: Sequence[int]) -> OutputT:
    """The global batch's output from the ranks' ``parts`` (see :func:`register_output_merge`)."""
    if len(parts) == 1:
        return parts[0]
    return cast(OutputT, _merge_for(type(parts[0]))(parts, sizes))


def _mean_loss(losses: Sequence[torch.Tensor], sizes: Sequence[int]) -> torch.Tensor:
    """A mean loss of the global batch: the shares' means weighted by their sizes."""
    if any(loss.dim() for loss in losses):
        return _cat(losses, "loss")  # one loss per item: the global batch's are all of them
    total = sum(sizes)
    return torch.stack(
        [loss * (size / total) for loss, size in zip(losses, sizes, strict=True)]
    ).sum()


def _cat(tensors: Sequence[torch.Tensor], what: str) -> torch.Tensor:
    try:
        return torch.cat(list(tensors))
    except RuntimeError as error:
        shapes = [tuple(t.shape) for t in tensors]
        raise ValueError(
            f"cannot join the ranks' {what} along the batch dimension (shapes {shapes}): {error}"
        ) from error


@register_output_merge(RegressionOutput)
@register_output_merge(ClassificationOutput)
@register_output_merge(MultiLabelClassificationOutput)
def _merge_prediction(parts: Sequence[Any], sizes: Sequence[int]) -> Any:
    return type(parts[0])(
        _mean_loss([p.loss for p in parts], sizes),
        _cat([p.output for p in parts], "output"),
        _cat([p.targets for p in parts], "targets"),
    )


@register_output_merge(SequenceOutput)
def _merge_sequence(parts: Sequence[SequenceOutput], sizes: Sequence[int]) -> SequenceOutput:
    predictions = [p.predictions for p in parts if p.predictions is not None]
    return SequenceOutput(
        _mean_loss([p.loss for p in parts], sizes),
        _cat([p.logits for p in parts], "logits"),
        _cat([p.targets for p in parts], "targets"),
        _cat(predictions, "predictions") if len(predictions) == len(parts) else None,
    )


_BUILT_IN = (RegressionOutput, ClassificationOutput, MultiLabelClassificationOutput, SequenceOutput)


class _GlobalBatch:
    """Rank 0's output of a global batch: the ranks' parts, merged on the metrics thread.

    With ``summed_loss`` (``loss_reduction="sum"``) a built-in output's scalar loss is the sum
    of the parts' losses, as one process would compute it, not their weighted mean.
    """

    __slots__ = ("parts", "sizes", "summed_loss")

    def __init__(self, parts: list[Any], sizes: list[int], summed_loss: bool) -> None:
        self.parts = parts
        self.sizes = sizes
        self.summed_loss = summed_loss

    def sync(self) -> Any:
        """The merged output, detached (runs where other outputs' ``sync`` runs)."""
        parts: list[Any] = [synced(p) for p in self.parts]
        merged = merge_outputs(parts, self.sizes)
        if self.summed_loss and isinstance(merged, _BUILT_IN) and merged.loss.dim() == 0:
            counts = None if parts[0].summed_over is None else sum(p.summed_over for p in parts)
            merged = dataclasses.replace(
                merged, loss=torch.stack([p.loss for p in parts]).sum(), summed_over=counts
            )
        return merged


# --- sending them to rank 0 ------------------------------------------------------------------


_FIELDS: dict[type, tuple[str, ...]] = {}  # each output dataclass's field names, read once


def _tensor_fields(item: Any) -> list[str]:
    """The fields of the output ``item`` that hold a tensor (or None), checked: the type is a
    dataclass that rank 0 can merge (every rank with a share fails alike on one it cannot)."""
    kind = type(item)
    names = _FIELDS.get(kind)
    if names is None:
        if not dataclasses.is_dataclass(item) or isinstance(item, type):
            raise TypeError(
                f"DistributedDataParallel sends outputs to rank 0 as the tensor fields of a "
                f"dataclass; {kind.__name__} is not a dataclass"
            )
        _merge_for(kind)
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(item))
    # a field is sent when it holds a tensor (or None) in this very output
    return [name for name in names if isinstance(getattr(item, name), torch.Tensor | None)]


def _header_block(
    items: Sequence[Any], wish: int
) -> tuple[torch.Tensor, list[list[str]], list[list[torch.Tensor | None]]]:
    """The int64 block a rank all-gathers (its stop ``wish`` and the bytes of its outputs,
    then each unit's bytes and tensor header), and each unit's tensor field names and
    tensors. Built as one list: a tensor made per unit costs more than the unit's header."""
    names: list[list[str]] = []
    tensors: list[list[torch.Tensor | None]] = []
    rows = [wish, 0]
    for item in items:
        fields = [] if item is None else _tensor_fields(item)
        names.append(fields)
        tensors.append([getattr(item, name) for name in fields])
        if item is None:
            rows += [0] * _HEADER
            continue
        header = tensor_header(tensors[-1])
        if len(header) > _HEADER - 2:
            raise ValueError(
                f"{type(item).__name__} has too many tensor fields or dimensions to send to "
                f"rank 0 (a header of {len(header)} numbers, at most {_HEADER - 2})"
            )
        size = payload_size(header)
        rows[1] += size
        rows += [size, len(header), *header, *[0] * (_HEADER - 2 - len(header))]
    return torch.tensor(rows, dtype=torch.int64), names, tensors


def _pack(payload: torch.Tensor, tensors: Sequence[Sequence[torch.Tensor | None]]) -> None:
    """Pack each unit's tensors into ``payload``, one after the other (each unit's bytes a
    multiple of the alignment, as :func:`payload_size` counts them)."""
    offset = 0
    for unit_tensors in tensors:
        offset = pack_into(payload, offset, unit_tensors)


def exchange_outputs(
    ranks: Ranks,
    items: Sequence[Any],
    wish: int,
    shares: Sequence[tuple[int, ...]],
    *,
    summed_loss: bool,
    watch: ProgressWatch | None,
) -> tuple[list[Any], int]:
    """After a chunk of units: every rank's stop ``wish``, and the units' outputs on rank 0.

    ``items`` holds this rank's output of each unit of the chunk (None for an empty share) and
    ``shares`` every rank's share sizes of each unit; every rank passes the same number of
    units. Two collectives per chunk, whatever its length and the world size: an all-gather of
    a small int64 block per rank (its stop wish and the shapes of its outputs' tensors), then a
    gather of the outputs' bytes on rank 0. Returns rank 0's output of each unit in which it
    had one (its own, or the parts to merge; an empty list on other ranks) and the highest
    stop wish of any rank. With a ``watch`` (right after user code) the collectives run on the
    ranks' watched groups and a rank that never joins them is named (``progress.py``); without
    one, on the job's groups with its timeout.
    """
    if ranks.world == 1:
        return [item for item in items if item is not None], wish
    block, names, tensors = _header_block(items, wish)
    guard = collective if watch is None else watch.watching
    small, large = (ranks.cpu, None) if watch is None else (ranks.watched_cpu, ranks.watched)
    blocks = [torch.empty_like(block) for _ in range(ranks.world)]
    with guard("exchanging stop wishes and output shapes"):
        dist.all_gather(blocks, block, group=small)
    table = torch.stack(blocks).tolist()
    stop = max(row[0] for row in table)
    size = max(row[1] for row in table[1:])
    if size == 0:  # only rank 0 has outputs
        return ([item for item in items if item is not None] if ranks.is_main else []), stop
    payload = torch.zeros(size, dtype=torch.uint8, device=ranks.device)
    if not ranks.is_main:
        _pack(payload, tensors)
    gathered = [torch.empty_like(payload) for _ in range(ranks.world)] if ranks.is_main else None
    with guard("gathering the outputs on rank 0"):
        dist.gather(payload, gathered, dst=0, group=large)
    if gathered is None:
        return [], stop
    return _received(items, names, table, gathered, shares, summed_loss), stop


def _received(
    items: Sequence[Any],
    names: Sequence[Sequence[str]],
    table: Sequence[Sequence[int]],
    gathered: Sequence[torch.Tensor],
    shares: Sequence[tuple[int, ...]],
    summed_loss: bool,
) -> list[Any]:
    """Rank 0's output of each unit in which it had one: its own, or the ranks' parts read
    from the ``gathered`` payloads with the headers of the all-gathered ``table``."""
    world = len(table)
    offsets = [0] * world
    merged: list[Any] = []
    for unit, item in enumerate(items):
        if item is None:
            continue
        parts, part_sizes = [item], [shares[unit][0]]
        start = 2 + unit * _HEADER
        for src in range(1, world):
            row = table[src]
            length, count = row[start], row[start + 1]
            if count == 0:  # no output on that rank (an empty share)
                continue
            header = row[start + 2 : start + 2 + count]
            received = unpack_tensors(header, gathered[src][offsets[src] : offsets[src] + length])
            offsets[src] += length
            parts.append(dataclasses.replace(item, **dict(zip(names[unit], received, strict=True))))
            part_sizes.append(shares[unit][src])
        merged.append(item if len(parts) == 1 else _GlobalBatch(parts, part_sizes, summed_loss))
    return merged
