"""The gradient all-reduce of ``DistributedDataParallel``: torch's own reducer.

:class:`TorchReducer` builds ``torch.nn.parallel.DistributedDataParallel`` over the model's
trained parameters, as the composable ``torch.distributed._composable.replicate`` does (a
``ParameterList`` of the same parameter objects), but leaves the model itself alone: no
wrapper, no class swap, no forward hooks, and nothing left on the model once the run closes.
Torch's reducer is armed for a step by the strategy instead of by a forward through the
wrapper, so the user's ``train_step`` computes its loss however it likes (``self(...)``,
submodules, several calls) and the reducer all-reduces the gradients in its buckets while
``backward`` runs, overlapped with it, with torch's own communication hook (C++: no Python
runs inside backward)::

    prepare()            # a window's last unit, every share non-empty: arm the reducer
    train_step(share)    # backward: each full bucket is averaged over the ranks (async), on
                         # the watched group (``ranks.py``): a rank that never joins fails it
                         # after progress_timeout
    check_finished()     # every trained parameter got a gradient (else the reducer waits)

Units inside an accumulation window do not arm it: their gradients add up locally in the
``.grad`` slots (torch's ``no_sync``) and the window's last unit reduces the sum. When some rank
has an empty share in that unit (a tail batch smaller than the world, a batch size below it),
that rank has no backward to run: every rank then reduces by hand instead
(:meth:`TorchReducer.all_reduce_by_hand`, one all-reduce per dtype and device with a presence
flag per parameter, so that a parameter no rank has a gradient for keeps none). Both paths
average over the ranks; the strategy weights each share's loss so that the average is the
global batch's gradient.

A failed all-reduce surfaces as a RuntimeError out of torch's autograd engine (torch's reducer
waits for its buckets at the end of backward): :func:`raised_by_autograd` tells it from an error
of the user's forward pass or of Python code the backward pass runs.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from ember._errors import DistributedError
from ember.train._step import trained_parameters
from ember.train._strategy.collectives import broadcast_coalesced, collective
from ember.train._strategy.ddp.ranks import Ranks

__all__ = ["TorchReducer", "check_not_distributed", "raised_by_autograd"]

_UNFINISHED = "Expected to have finished reduction in the prior iteration"
_AUTOGRAD = os.path.dirname(torch.autograd.__file__) + os.sep


def check_not_distributed(model: nn.Module) -> None:
    """Refuse a model that torch already replicates or shards: its gradients would be reduced
    twice (or by two engines that disagree on the buckets)."""
    from torch.distributed._composable.contract import _get_registry

    if isinstance(model, nn.parallel.DistributedDataParallel):
        raise ValueError(
            "the model is a torch.nn.parallel.DistributedDataParallel wrapper: pass the module "
            "itself (model.module); ember's DistributedDataParallel applies torch's reducer"
        )
    applied = sorted(_get_registry(model) or {})
    if applied:
        raise ValueError(
            f"the model is already under torch's {', '.join(applied)}: ember's "
            "DistributedDataParallel applies torch's reducer itself; pass the model without it"
        )


def raised_by_autograd(error: BaseException) -> bool:
    """True when ``error`` came out of torch's autograd engine itself (where torch's reducer
    waits for its all-reduces): its traceback enters ``torch.autograd.backward`` and runs no
    Python code outside ``torch.autograd`` after it (a custom ``backward``, a hook)."""
    frames = []
    trace = error.__traceback__
    while trace is not None:
        frames.append(trace.tb_frame.f_code)
        trace = trace.tb_next
    entry = torch.autograd.backward.__code__
    if entry not in frames:
        return False
    inner = frames[frames.index(entry) :]
    return all(code.co_filename.startswith(_AUTOGRAD) for code in inner)


class TorchReducer:
    """Torch's DDP reducer over ``model``'s trained parameters (see the module doc), on the
    ranks' watched group. With one rank there is nothing to reduce and every method is a
    no-op."""

    def __init__(self, model: nn.Module, ranks: Ranks, bucket_cap_mb: float) -> None:
        self._names = [name for name, param in trained_parameters(model) if param.requires_grad]
        self._params = [param for _, param in trained_parameters(model) if param.requires_grad]
        self._ranks = ranks
        self._ddp: nn.parallel.DistributedDataParallel | None = None  # buffers: the strategy's
        if ranks.world == 1 or not self._params:
            return
        # rank 0's weights to every rank on the default group (its timeout: the ranks may
        # arrive far apart at the start), not in torch's constructor, which would use the
        # watched group
        with collective("broadcasting rank 0's weights"):
            broadcast_coalesced([p.detach() for p in self._params], 0)
        self._ddp = nn.parallel.DistributedDataParallel(
            nn.ParameterList(self._params),
            device_ids=[ranks.device] if ranks.device.type == "cuda" else None,
            bucket_cap_mb=bucket_cap_mb,
            process_group=ranks.watched,
            init_sync=False,
        )

    def prepare(self) -> None:
        """Arm the reducer for the next backward pass (what DDP's forward does)."""
        ddp = self._ddp
        if ddp is None:
            return
        try:
            ddp._pre_forward()  # type: ignore[no-untyped-call]  # untyped in torch
        except RuntimeError as error:
            if _UNFINISHED in str(error):
                raise self._unused() from error
            raise
        ddp._post_forward(None)  # type: ignore[no-untyped-call]  # untyped in torch

    def check_finished(self, ran: bool) -> None:
        """After an armed step: every trained parameter must have got a gradient, or torch's
        reducer still waits for it (and the other ranks for its bucket)."""
        if self._ddp is not None and ran and any(p.grad is None for p in self._params):
            raise self._unused()

    def _unused(self) -> DistributedError:
        missing = [n for n, p in zip(self._names, self._params, strict=True) if p.grad is None]
        which = f" ({', '.join(missing)})" if missing else ""
        return DistributedError(
            f"a trained parameter got no gradient in a step{which}: under "
            "DistributedDataParallel every trained parameter must get one in every step "
            "(torch's reducer waits for it); freeze it with requires_grad_(False) or use it"
        )

    def all_reduce_by_hand(self) -> None:
        """Average the ``.grad`` slots over the ranks without the reducer (a rank with an empty
        share has none): zeros stand for a missing gradient, and a parameter keeps none only
        when no rank had one. The caller watches it (a RuntimeError when it fails)."""
        if self._ddp is None:
            return
        params, ranks = self._params, self._ranks
        flags = torch.tensor([p.grad is not None for p in params], dtype=torch.float32)
        # one presence flag per parameter: > 0 after the sum when some rank had a gradient
        groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
        for index, param in enumerate(params):
            groups.setdefault((param.dtype, param.device), []).append(index)
        flats = {
            key: torch.cat([_flat_grad(params[index]) for index in indices])
            for key, indices in groups.items()
        }
        for flat in flats.values():
            dist.all_reduce(flat, group=ranks.watched)
        dist.all_reduce(flags, group=ranks.watched_cpu)  # the host waits here, not on NCCL
        present = flags.tolist()
        for key, indices in groups.items():
            flat = flats[key].div_(ranks.world)
            offset = 0
            for index in indices:
                param = params[index]
                value = flat[offset : offset + param.numel()].view_as(param)
                offset += param.numel()
                if param.grad is not None:
                    param.grad.copy_(value)
                elif present[index] > 0:
                    param.grad = value.clone()

    def close(self) -> None:
        """Drop torch's reducer: its autograd hooks leave the parameters with it."""
        self._ddp = None


def _flat_grad(param: nn.Parameter) -> torch.Tensor:
    grad = param.grad
    return param.new_zeros(param.numel()) if grad is None else grad.reshape(-1)
