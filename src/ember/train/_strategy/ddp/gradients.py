"""The bucketed gradient all-reduce of ``DistributedDataParallel``.

:class:`GradientReducer` hooks every trained parameter and, while ``train_step``'s backward pass
runs, copies each gradient (weighted by this rank's share of the global batch) into a bucket and
all-reduces a bucket as soon as it is complete, so that communication overlaps the rest of the
backward pass, as torch's DDP reducer does. After the step, every rank holds the same global
batch's gradients, and the replicas' optimizer steps keep them equal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ember._errors import DistributedError
from ember.distributed._processes import collective
from ember.train._step import GradientsParams, trained_parameters

__all__ = ["GradientReducer"]

_FIRST_BUCKET_BYTES = 2**20


class _Bucket:
    """One all-reduce: its parameters' gradients and a presence flag per parameter, in one
    flat tensor (so one collective carries both)."""

    __slots__ = ("flags", "flat", "names", "params", "pending", "seen", "work")

    def __init__(self, params: list[tuple[str, nn.Parameter]]) -> None:
        self.names = [name for name, _ in params]
        self.params = [param for _, param in params]
        numel = sum(p.numel() for p in self.params)
        first = self.params[0]
        # the gradients, then one presence flag per parameter (> 0 once reduced: some rank had it)
        self.flat = torch.zeros(numel + len(params), dtype=first.dtype, device=first.device)
        self.flags = self.flat[numel:]
        self.seen = [False] * len(params)
        self.pending = len(params)
        self.work: Any = None


class GradientReducer:
    """All-reduces gradients in buckets while backward runs, as torch's DDP reducer does.

    Buckets hold parameters in reverse order (backward produces the last layers' gradients
    first) up to ``bucket_bytes``, the first one on a GPU up to 1 MiB (so communication starts
    early, as torch's DDP does; on the CPU the cores that would overlap it run the backward
    pass, and an extra collective only costs). A bucket is launched once all its gradients
    arrived and every bucket before it was launched, so all ranks issue the same collectives in
    the same order. ``before_reduction`` runs before a step's first bucket is launched (the
    progress agreement, so a hung rank is named instead of waited for).
    A gradient is copied in multiplied by this rank's ``weight``; the sum over ranks is then
    the global batch's gradient. :meth:`finish` launches what is left (zeros for parameters
    without a gradient here), waits, and writes the results back into the step's gradients.
    """

    def __init__(
        self,
        model: nn.Module,
        bucket_bytes: int,
        *,
        before_reduction: Callable[[], None] | None = None,
    ) -> None:
        params = [(n, p) for n, p in trained_parameters(model) if p.requires_grad]
        self.buckets: list[_Bucket] = []
        self._slot: dict[nn.Parameter, tuple[_Bucket, int, int]] = {}
        current: list[tuple[str, nn.Parameter]] = []
        size = 0
        for name, param in reversed(params):
            first = not self.buckets and param.device.type == "cuda"
            cap = min(bucket_bytes, _FIRST_BUCKET_BYTES) if first else bucket_bytes
            if current and (
                size + param.numel() * param.element_size() > cap
                or (param.dtype, param.device) != (current[0][1].dtype, current[0][1].device)
            ):
                self._add_bucket(current)
                current, size = [], 0
            current.append((name, param))
            size += param.numel() * param.element_size()
        if current:
            self._add_bucket(current)
        self._before_reduction = before_reduction
        self._weight = 1.0
        self._next = 0
        self._active = False
        self._hooks = [
            p.register_post_accumulate_grad_hook(self._on_grad)  # type: ignore[no-untyped-call]  # untyped in torch
            for _, p in params
        ]

    def _add_bucket(self, params: list[tuple[str, nn.Parameter]]) -> None:
        bucket = _Bucket(params)
        offset = 0
        for index, (_, param) in enumerate(params):
            self._slot[param] = (bucket, index, offset)
            offset += param.numel()
        self.buckets.append(bucket)

    def prepare(self, weight: float) -> None:
        """Start a step whose gradients count ``weight`` times in the sum over ranks."""
        self._weight, self._next, self._active = weight, 0, True
        for bucket in self.buckets:
            bucket.seen = [False] * len(bucket.params)
            bucket.pending = len(bucket.params)

    def _on_grad(self, param: torch.Tensor) -> None:
        if not self._active:
            return
        bucket, index, offset = self._slot[param]  # type: ignore[index]  # a trained parameter
        if bucket.seen[index]:
            raise DistributedError(
                f"parameter {bucket.names[index]} got a gradient twice in one train_step: "
                "DistributedDataParallel reduces the gradients of one backward pass per step"
            )
        assert param.grad is not None
        view = bucket.flat[offset : offset + param.numel()]
        if self._weight == 1.0:
            view.copy_(param.grad.reshape(-1))
        else:
            torch.mul(param.grad.reshape(-1), self._weight, out=view)
        bucket.seen[index] = True
        bucket.pending -= 1
        if bucket.pending == 0:
            self._launch_ready()

    def _launch_ready(self) -> None:
        while self._next < len(self.buckets) and self.buckets[self._next].pending == 0:
            if self._next == 0 and self._before_reduction is not None:
                self._before_reduction()  # every rank got here: no collective can hang
            bucket = self.buckets[self._next]
            # kernels, not a copy from the host: that would wait for the device mid-backward
            if all(bucket.seen):
                bucket.flags.fill_(1)
            else:
                bucket.flags.zero_()
                for index, seen in enumerate(bucket.seen):
                    if seen:
                        bucket.flags[index].fill_(1)
            with collective("the gradient all-reduce"):
                bucket.work = dist.all_reduce(bucket.flat, async_op=True)
            self._next += 1

    def finish(self, grads: GradientsParams | None) -> GradientsParams:
        """The step's gradients summed over ranks (what ``optimizer_step`` takes)."""
        self._active = False
        for bucket in self.buckets[self._next :]:
            offset = 0
            for index, param in enumerate(bucket.params):
                if not bucket.seen[index]:
                    bucket.flat[offset : offset + param.numel()].zero_()
                offset += param.numel()
            bucket.pending = 0
        self._launch_ready()
        local = dict(grads or {})
        reduced: dict[str, torch.Tensor] = {}
        for bucket in self.buckets:
            with collective("the gradient all-reduce"):
                bucket.work.wait()
            # only a parameter without a gradient here needs the flags read back (a sync on CUDA)
            flags = None if all(bucket.seen) else bucket.flags.tolist()
            offset = 0
            for index, (name, param) in enumerate(zip(bucket.names, bucket.params, strict=True)):
                value = bucket.flat[offset : offset + param.numel()].view_as(param)
                offset += param.numel()
                grad = local.pop(name, None)
                if grad is not None and bucket.seen[index]:
                    reduced[name] = grad.copy_(value)  # in place: the step's own tensor
                elif bucket.seen[index] or (flags is not None and flags[index] > 0):
                    reduced[name] = value.clone()
        if local:
            raise DistributedError(
                f"train_step returned gradients for {sorted(local)} that backward did not write "
                "into .grad: DistributedDataParallel reduces gradients as backward produces "
                "them; build the output with TrainOutput.from_loss"
            )
        return GradientsParams(reduced)

    def close(self) -> None:
        """Remove the gradient hooks from the model's parameters."""
        for hook in self._hooks:
            hook.remove()
