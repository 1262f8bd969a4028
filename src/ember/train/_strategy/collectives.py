"""The collectives ember's strategies run between ranks: tensor-only messages, and a failed
collective named.

Nothing is ever pickled; point-to-point messages are avoided (gloo's take ~10x a small
collective's time). :func:`broadcast_bytes` and :func:`gather_bytes` move raw bytes;
:func:`pack_tensors` / :func:`unpack_tensors` lay tensors out behind an int64 header
(:func:`tensor_header`); :func:`broadcast_coalesced` broadcasts many tensors as one.

A peer that died or failed shows up in the survivors as an error of the transport ("Connection
closed by peer", a timeout): :func:`collective` turns it into a :class:`DistributedError` naming
the operation and this rank, and :func:`raised_by_collective` tells such an error, raised inside
torch's own collectives (FSDP's), from one of the user's code. A watched collective
(``ddp/progress.py``) also names a rank that stopped making progress.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist

from ember._errors import DistributedError

__all__ = [
    "broadcast_bytes",
    "broadcast_coalesced",
    "collective",
    "collective_error",
    "gather_bytes",
    "pack_into",
    "pack_tensors",
    "payload_size",
    "raised_by_collective",
    "tensor_header",
    "unpack_tensors",
]

# Tensors travel as raw bytes behind an int64 header; these are the dtypes a header can name.
_DTYPES = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
_ALIGN = 16  # every tensor starts at a multiple of this in a payload, so it can be viewed back


def broadcast_bytes(data: bytes | None, src: int = 0, group: Any = None) -> bytes:
    """``src``'s ``data`` on every rank (others pass None), through a CPU group."""
    size = torch.tensor([0 if data is None else len(data)], dtype=torch.int64)
    dist.broadcast(size, src, group=group)
    payload = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if data and dist.get_rank() == src
        else torch.empty(int(size.item()), dtype=torch.uint8)
    )
    if payload.numel():
        dist.broadcast(payload, src, group=group)
    return payload.numpy().tobytes()


def gather_bytes(data: bytes, dst: int = 0, group: Any = None) -> list[bytes] | None:
    """Every rank's ``data``, in rank order, on ``dst`` (None elsewhere), through a CPU group."""
    world = dist.get_world_size()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=group)
    lengths = [int(size.item()) for size in sizes]
    mine = torch.zeros(max(lengths), dtype=torch.uint8)
    mine[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else 0
    main = dist.get_rank() == dst
    gathered = [torch.empty_like(mine) for _ in range(world)] if main else None
    if mine.numel():
        dist.gather(mine, gathered, dst=dst, group=group)
    if gathered is None:
        return None
    return [part[:length].numpy().tobytes() for part, length in zip(gathered, lengths, strict=True)]


def tensor_header(tensors: Sequence[torch.Tensor | None]) -> list[int]:
    """What :func:`unpack_tensors` needs to read ``tensors`` back from a payload: their count,
    then per tensor ``0`` (None) or ``1, dtype code, ndim, *shape``."""
    header = [len(tensors)]
    for tensor in tensors:
        if tensor is None:
            header.append(0)
            continue
        if tensor.dtype not in _DTYPES:
            raise TypeError(f"cannot send a tensor of dtype {tensor.dtype} to another rank")
        header += [1, _DTYPES.index(tensor.dtype), tensor.dim(), *tensor.shape]
    return header


def _layout(header: Sequence[int]) -> list[tuple[torch.dtype, list[int], int, int] | None]:
    """(dtype, shape, offset, bytes) of each tensor of a payload, None for a None."""
    specs: list[tuple[torch.dtype, list[int], int, int] | None] = []
    position, offset = 1, 0
    for _ in range(header[0]):
        if header[position] == 0:
            specs.append(None)
            position += 1
            continue
        dtype, ndim = _DTYPES[header[position + 1]], header[position + 2]
        shape = list(header[position + 3 : position + 3 + ndim])
        position += 3 + ndim
        nbytes = int(torch.Size(shape).numel()) * dtype.itemsize
        specs.append((dtype, shape, offset, nbytes))
        offset += nbytes + (-nbytes % _ALIGN)
    return specs


def payload_size(header: Sequence[int]) -> int:
    """The bytes :func:`pack_tensors` needs for tensors with this header."""
    specs = [spec for spec in _layout(header) if spec is not None]
    return 0 if not specs else specs[-1][2] + specs[-1][3] + (-specs[-1][3] % _ALIGN)


def pack_tensors(
    tensors: Sequence[torch.Tensor | None], size: int, device: torch.device
) -> torch.Tensor:
    """The raw bytes of ``tensors`` (each aligned), zero-padded to ``size`` bytes on ``device``."""
    payload = torch.zeros(size, dtype=torch.uint8, device=device)
    pack_into(payload, 0, tensors)
    return payload


def pack_into(payload: torch.Tensor, offset: int, tensors: Sequence[torch.Tensor | None]) -> int:
    """Write the raw bytes of ``tensors`` (each aligned) into ``payload`` from byte ``offset``;
    returns the offset after them (what :func:`payload_size` counts)."""
    for tensor in tensors:
        if tensor is None:
            continue
        data = tensor.detach().reshape(-1).view(torch.uint8)
        size = data.numel()
        payload[offset : offset + size] = data
        offset += size + (-size % _ALIGN)
    return offset


def unpack_tensors(header: Sequence[int], payload: torch.Tensor) -> list[torch.Tensor | None]:
    """The tensors :func:`pack_tensors` packed (views of ``payload``)."""
    return [
        None
        if spec is None
        else payload[spec[2] : spec[2] + spec[3]].view(spec[0]).reshape(spec[1])
        for spec in _layout(header)
    ]


@torch.no_grad()
def broadcast_coalesced(tensors: Sequence[torch.Tensor], src: int = 0, group: Any = None) -> None:
    """Overwrite ``tensors`` with ``src``'s values, one broadcast per dtype and device."""
    groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
    for tensor in tensors:
        groups.setdefault((tensor.dtype, tensor.device), []).append(tensor)
    for members in groups.values():
        flat = torch.cat([t.detach().reshape(-1) for t in members])
        dist.broadcast(flat, src, group=group)
        offset = 0
        for tensor in members:
            tensor.copy_(flat[offset : offset + tensor.numel()].view_as(tensor))
            offset += tensor.numel()


# --- a failed collective, named --------------------------------------------------------

_TORCH_DISTRIBUTED = os.path.dirname(dist.__file__) + os.sep


@contextlib.contextmanager
def collective(what: str) -> Iterator[None]:
    """Turn a failed collective into a :class:`DistributedError` saying what was being done.

    A peer that died or failed shows up in the survivors as an error of the transport
    ("Connection closed by peer", a timeout); this names the operation and this rank.
    """
    try:
        yield
    except RuntimeError as error:  # torch's DistBackendError is one
        raise collective_error(what, error) from error


def collective_error(what: str, error: BaseException) -> DistributedError:
    """The :class:`DistributedError` of a collective (``what``) that failed with ``error``."""
    rank = dist.get_rank() if dist.is_initialized() else "?"
    return DistributedError(
        f"rank {rank}: {what} failed: another rank has probably died or failed (see its "
        f"error), or the collective timed out: {error}"
    )


def raised_by_collective(error: BaseException) -> bool:
    """True when ``error`` is a collective's failure inside ``torch.distributed`` (FSDP's
    all-gathers in forward, its reduce-scatters in backward), not an error of the user's code
    or another of torch's: the innermost frame of its traceback is one of torch.distributed's
    and the error is torch.distributed's or its transport's (gloo, NCCL)."""
    trace = error.__traceback__
    if trace is None:
        return False
    while trace.tb_next is not None:
        trace = trace.tb_next
    if not trace.tb_frame.f_code.co_filename.startswith(_TORCH_DISTRIBUTED):
        return False
    text = str(error).lower()
    return isinstance(error, dist.DistError) or "gloo" in text or "nccl" in text
