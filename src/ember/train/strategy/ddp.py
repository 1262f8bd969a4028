"""Distributed data parallel on ``torch.distributed`` (DESIGN §9, B9).

One process per device (``torchrun --nproc-per-node N``, torchrun's rendezvous across nodes, or
:func:`ember.distributed.spawn`), each running the same script. The user's code is the one of a
single process: the loaders' batch size is the **global** batch, and every rank reads its share
of every global batch (:class:`~ember.data.shard.ShardedDataLoader`). Per global batch, on every
rank::

    shares = every rank's share size of this batch (rank 0's is the largest, never empty)
    broadcast rank 0's buffers (BatchNorm statistics, ...)
    train_step(my share)      # as its backward produces gradients, buckets of them are
                              # all-reduced: sum over ranks of grad x share / global batch
                              # (an empty share skips the step and contributes zeros)
    lr_step, optimizer_step   # the same reduced gradients everywhere: replicas stay equal
    all-gather (CPU group)    # every rank's stop wish and its output's shapes
    gather on rank 0          # the outputs' bytes (tensors only, never pickle); rank 0 emits
                              # ProcessedItem with the global batch's output (merged lazily,
                              # on the metrics thread)
    stop if any rank wished   # every rank stops after the same batch

Validation reads shares of the valid loader the same way. So the metrics rank 0 computes and
logs are those of the global batch, as in one process, and the gradient is the global batch's
for a loss that averages over the batch's items (``loss_reduction="mean"``; use ``"sum"`` for
a loss that sums them).

Rank 0 is the main worker: it alone renders, writes the logs and the checkpoints (with every
rank's RNG state, so that a resume is exact); every rank restores a checkpoint, and decisions
(interrupts, early stopping, a failed metrics thread) are agreed by all ranks. An exception on
one rank ends training there and tears the process group down, so the other ranks fail at once
with a :class:`~ember.distributed.DistributedError` instead of waiting for the timeout.

Outputs reach rank 0 as the tensor fields of a dataclass; rank 0 merges the parts in rank order.
The built-in outputs concatenate ``output``/``logits``/``targets`` and average a scalar ``loss``
weighted by the shares. A user-defined output type is reduced when it is a dataclass whose
tensor fields hold the batch's values and it has a ``merge(parts, sizes)`` classmethod (or one
registered with :func:`register_output_merge`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import torch
import torch.distributed as dist
from torch import nn

from ember.data import BatchDataLoader, DataLoader
from ember.data.shard import ShardedDataLoader, ShardIterator
from ember.distributed import (
    DEFAULT_TIMEOUT,
    DistributedError,
    broadcast_bytes,
    broadcast_coalesced,
    collective,
    gather_bytes,
    init_from_environment,
    pack_tensors,
    payload_size,
    tensor_header,
    unpack_tensors,
)
from ember.train.checkpoint.record import Record, state_record
from ember.train.checkpoint.rng import rng_state
from ember.train.checkpoint.training import TrainingCheckpointer
from ember.train.events import ProcessedItem, TrainingItem
from ember.train.gradient_checkpointing import checkpointed
from ember.train.interrupter import Interrupter
from ember.train.learner import Learner
from ember.train.metric.store import MetricQuery
from ember.train.outputs import (
    ClassificationOutput,
    MultiLabelClassificationOutput,
    RegressionOutput,
    SequenceOutput,
)
from ember.train.processor import EventProcessor
from ember.train.step import GradientsAccumulator, GradientsParams, trained_parameters
from ember.train.strategy.base import FitResult, TrainingComponents, resume, run_epochs

if TYPE_CHECKING:
    from ember.train.checkpoint.learning import LearningCheckpointer, TrainingRecords
    from ember.train.early_stopping import EarlyStoppingStrategy

__all__ = ["DistributedDataParallel", "merge_outputs", "register_output_merge"]

log = logging.getLogger("ember.train")

OutputT = TypeVar("OutputT")
Merge = Callable[[Sequence[Any], Sequence[int]], Any]
_FIRST_BUCKET_BYTES = 2**20
_HEADER = 128  # int64 numbers per rank for its stop wish and its output's shapes
RANKS_RNG_KEY = "ranks_rng"  # in rank 0's state record: every rank's RNG state, in rank order


# --- outputs ---------------------------------------------------------------------------------

_MERGES: dict[type, Merge] = {}


def register_output_merge(output_type: type[OutputT]) -> Callable[[Merge], Merge]:
    """Register ``fn(parts, sizes) -> output`` merging the ranks' outputs of ``output_type``.

    ``parts`` are the outputs of the ranks with a non-empty share, in rank order, and ``sizes``
    their share sizes; the result stands for the global batch. A ``merge`` classmethod on the
    type does the same without registering.
    """

    def register(fn: Merge) -> Merge:
        _MERGES[output_type] = fn
        return fn

    return register


def _merge_for(output_type: type) -> Merge:
    for kind in output_type.__mro__:
        if kind in _MERGES:
            return _MERGES[kind]
    merge = getattr(output_type, "merge", None)
    if callable(merge) and dataclasses.is_dataclass(output_type):
        return cast(Merge, merge)
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
        parts = [p.sync() if callable(getattr(p, "sync", None)) else p for p in self.parts]
        merged = merge_outputs(parts, self.sizes)
        if self.summed_loss and isinstance(merged, _BUILT_IN) and merged.loss.dim() == 0:
            merged = dataclasses.replace(merged, loss=torch.stack([p.loss for p in parts]).sum())
        return merged


def _tensor_fields(item: Any) -> list[str]:
    if not dataclasses.is_dataclass(item) or isinstance(item, type):
        raise TypeError(
            f"DistributedDataParallel sends outputs to rank 0 as the tensor fields of a "
            f"dataclass; {type(item).__name__} is not a dataclass"
        )
    return [
        f.name
        for f in dataclasses.fields(item)
        if isinstance(getattr(item, f.name), torch.Tensor | None)
    ]


# --- ranks, gradients ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Ranks:
    """This process's place in the job; ``cpu`` is the group for small CPU messages."""

    rank: int
    world: int
    device: torch.device
    cpu: Any  # a ProcessGroup, or None for the default group

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def broadcast_flag(self, value: bool, what: str) -> bool:
        """Rank 0's ``value`` on every rank."""
        flag = torch.tensor([int(value)], dtype=torch.int64)
        with collective(what):
            dist.broadcast(flag, 0, group=self.cpu)
        return bool(flag.item())


class _Bucket:
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


class _GradientReducer:
    """All-reduces gradients in buckets while backward runs, as torch's DDP reducer does.

    Buckets hold parameters in reverse order (backward produces the last layers' gradients
    first) up to ``bucket_bytes``, the first one on a GPU up to 1 MiB (so communication starts
    early, as torch's DDP does; on the CPU the cores that would overlap it run the backward
    pass, and an extra collective only costs). A bucket is launched once all its gradients
    arrived and every bucket before it was launched, so all ranks issue the same collectives in
    the same order.
    A gradient is copied in multiplied by this rank's ``weight``; the sum over ranks is then
    the global batch's gradient. :meth:`finish` launches what is left (zeros for parameters
    without a gradient here), waits, and writes the results back into the step's gradients.
    """

    def __init__(self, model: nn.Module, bucket_bytes: int) -> None:
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
        for hook in self._hooks:
            hook.remove()


# --- rank 0 alone writes; every rank agrees ----------------------------------------------------


class _MainEvents:
    """Rank 0's events go to the real processor; a flush tells every rank if it failed."""

    def __init__(self, processor: EventProcessor, ranks: _Ranks) -> None:
        self._processor = processor
        self._ranks = ranks
        self.process_train = processor.process_train
        self.process_valid = processor.process_valid

    @property
    def error(self) -> BaseException | None:
        return getattr(self._processor, "error", None)

    def flush(self) -> None:
        self._processor.flush()
        self._ranks.broadcast_flag(self.error is not None, "agreeing on the metrics thread")


class _WorkerEvents:
    """The events of ranks > 0 go nowhere; a flush learns whether rank 0's metrics failed."""

    def __init__(self, ranks: _Ranks) -> None:
        self._ranks = ranks
        self.error: BaseException | None = None

    def process_train(self, event: Any) -> None:
        """Dropped: rank 0 logs the global batches."""

    def process_valid(self, event: Any) -> None:
        """Dropped: rank 0 logs the global batches."""

    def flush(self) -> None:
        if self._ranks.broadcast_flag(False, "agreeing on the metrics thread"):
            self.error = DistributedError("the metrics thread of rank 0 failed (see rank 0)")


class _AgreedEarlyStopping:
    """Rank 0 asks the strategy (only it has the logs); every rank gets its answer."""

    def __init__(self, strategy: EarlyStoppingStrategy, ranks: _Ranks) -> None:
        self._strategy = strategy
        self._ranks = ranks
        self.reason: str | None = None

    def should_stop(self, epoch: int, query: MetricQuery) -> bool:
        message = None
        if self._ranks.is_main and self._strategy.should_stop(epoch, query):
            reason = getattr(self._strategy, "reason", None)
            message = (reason or f"early stopping after epoch {epoch}").encode("utf-8")
        with collective("agreeing on early stopping"):
            answer = broadcast_bytes(message, 0, group=self._ranks.cpu)
        self.reason = answer.decode("utf-8") or None
        return self.reason is not None


class _RankRecords:
    """Stands in for the ``LearningCheckpointer`` inside a ``TrainingCheckpointer``: what rank 0
    saves also holds every rank's RNG state, and each rank restores its own."""

    def __init__(self, checkpointer: LearningCheckpointer, rank: int) -> None:
        self._checkpointer = checkpointer
        self._rank = rank
        self.rng_states: list[Any] = []

    @property
    def directory(self) -> Any:
        return self._checkpointer.directory

    def checkpoint(
        self, epoch: int, records: TrainingRecords, query: MetricQuery
    ) -> TrainingRecords:
        state = state_record({**records.state.metadata, RANKS_RNG_KEY: self.rng_states})
        return self._checkpointer.checkpoint(
            epoch, dataclasses.replace(records, state=state), query
        )

    def save(self, epoch: int, records: TrainingRecords) -> None:
        self._checkpointer.save(epoch, records)

    def restore(self, epoch: int) -> TrainingRecords:
        records = self._checkpointer.restore(epoch)
        metadata = dict(records.state.metadata)
        states = metadata.pop(RANKS_RNG_KEY, None) or []
        if self._rank < len(states):
            metadata["rng"] = states[self._rank]
        elif states:
            log.warning(
                "the checkpoint of epoch %d holds the RNG states of %d ranks, not of rank %d: it "
                "continues from rank 0's (the run is not exactly the uninterrupted one)",
                epoch,
                len(states),
                self._rank,
            )
        state = Record(tensors=records.state.tensors, metadata=metadata)
        return dataclasses.replace(records, state=state)

    def latest_complete_epoch(self) -> int | None:
        return self._checkpointer.latest_complete_epoch()

    def close(self) -> None:
        """Nothing: ``launch`` closes the real checkpointer."""


class _DistributedCheckpointer(TrainingCheckpointer):
    """Every rank restores; rank 0 alone writes, with the RNG states every rank sends it."""

    def __init__(self, checkpointer: TrainingCheckpointer, ranks: _Ranks) -> None:
        self._records = _RankRecords(checkpointer.checkpointer, ranks.rank)
        super().__init__(cast("LearningCheckpointer", self._records), checkpointer.early_stopping)
        self._ranks = ranks

    def checkpoint(
        self,
        epoch: int,
        learner: Learner[Any],
        loaders: Mapping[str, DataLoader[Any]],
        query: MetricQuery,
    ) -> None:
        mine = json.dumps(rng_state()).encode("utf-8")
        with collective("gathering the RNG states for the checkpoint"):
            states = gather_bytes(mine, 0, group=self._ranks.cpu)
        if states is not None:
            self._records.rng_states = [json.loads(state) for state in states]
            super().checkpoint(epoch, learner, loaders, query)

    def save_last(self) -> int | None:
        return super().save_last() if self._ranks.is_main else None


# --- the strategy ----------------------------------------------------------------------------


class DistributedDataParallel:
    """Data-parallel training over the processes of a ``torch.distributed`` job (see module doc).

    Uses the default process group if one exists (``torchrun`` + the user's
    ``init_process_group``, or :func:`ember.distributed.spawn`), else initialises it from
    torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``) or ``init_method``, with ``backend`` (default ``nccl`` when CUDA is
    available, else ``gloo``) and ``timeout`` for every collective. The device is
    ``cuda:LOCAL_RANK`` with nccl, the CPU with gloo, unless ``device`` is given.

    ``loss_reduction`` says how the step's loss reduces over its batch's items: ``"mean"``
    (gradients weighted by share / global batch) or ``"sum"`` (gradients summed). Gradients are
    reduced in buckets of ``bucket_cap_mb``. With ``broadcast_buffers`` rank 0's buffers are
    copied to every rank before each step and each validation, as torch's DDP does.
    """

    def __init__(
        self,
        backend: str | None = None,
        *,
        timeout: timedelta = DEFAULT_TIMEOUT,
        init_method: str | None = None,
        device: torch.device | str | None = None,
        loss_reduction: Literal["mean", "sum"] = "mean",
        bucket_cap_mb: float = 25.0,
        broadcast_buffers: bool = True,
    ) -> None:
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
        if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
            raise ValueError(f"timeout must be a positive timedelta, got {timeout!r}")
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        self.backend = backend
        self.timeout = timeout
        self.init_method = init_method
        self.device = torch.device(device) if device is not None else None
        self.loss_reduction = loss_reduction
        self.bucket_cap_mb = bucket_cap_mb
        self.broadcast_buffers = broadcast_buffers
        self._ranks: _Ranks | None = None
        self._world_group: Any = None

    def __repr__(self) -> str:
        return f"DistributedDataParallel(backend={self.backend!r}, device={self.device})"

    @property
    def rank(self) -> int:
        """This process's rank (from the process group, else from ``RANK``)."""
        return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))

    @property
    def world_size(self) -> int:
        """The number of processes (from the process group, else from ``WORLD_SIZE``)."""
        if dist.is_initialized():
            return dist.get_world_size()
        return int(os.environ.get("WORLD_SIZE", "1"))

    @property
    def is_main(self) -> bool:
        """True on rank 0, the only rank that renders and writes files."""
        return self.rank == 0

    def fit(
        self,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        """The epoch loop of reference §2.1 on every rank, over the ranks' shares."""
        ranks = self._setup()
        try:
            return self._fit(ranks, learner, train, valid, components, starting_epoch)
        except BaseException:
            self._abandon()
            raise

    def _setup(self) -> _Ranks:
        """Initialise the process group if needed; find this rank's device and CPU group."""
        if (
            self._ranks is not None
            and dist.is_initialized()
            and dist.group.WORLD is self._world_group
        ):
            return self._ranks
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        backend = (
            dist.get_backend()
            if dist.is_initialized()
            else self.backend or ("nccl" if torch.cuda.is_available() else "gloo")
        )
        device = self.device or (
            torch.device("cuda", local_rank) if "nccl" in backend else torch.device("cpu")
        )
        if device.type == "cuda":
            if "nccl" not in backend:
                raise ValueError(f"a CUDA device needs the nccl backend, got {backend!r}")
            torch.cuda.set_device(device)
        init_from_environment(backend, self.timeout, self.init_method, device)
        backend = dist.get_backend()
        # headers, flags and RNG states are small CPU tensors: gloo carries them
        cpu = None if "gloo" in backend else dist.new_group(backend="gloo", timeout=self.timeout)
        self._world_group = dist.group.WORLD
        self._ranks = _Ranks(dist.get_rank(), dist.get_world_size(), device, cpu)
        return self._ranks

    def _abandon(self) -> None:
        """After an error on this rank: tear the group down so the others fail now."""
        self._ranks = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # already failing: the first error is the one to report
                log.debug("destroying the process group failed", exc_info=True)

    def _fit(
        self,
        ranks: _Ranks,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        learner.fork(ranks.device)
        views = {
            name: ShardedDataLoader(
                _ember_loader(name, loader).to_device(ranks.device), ranks.rank, ranks.world
            )
            for name, loader in (("train", train), ("valid", valid))
        }
        loaders: dict[str, DataLoader[Any]] = dict(views)
        _check_same_run(ranks, learner, views, components, starting_epoch)
        agreed = Interrupter()
        early = components.early_stopping
        checkpointer = components.checkpointer
        here = dataclasses.replace(
            components,
            interrupter=agreed,
            processor=_MainEvents(components.processor, ranks)
            if ranks.is_main
            else _WorkerEvents(ranks),
            early_stopping=None if early is None else _AgreedEarlyStopping(early, ranks),
            checkpointer=None
            if checkpointer is None
            else _DistributedCheckpointer(checkpointer, ranks),
        )
        model = learner.model
        epochs: _Epochs | None = None
        try:
            resume(here, learner, loaders, starting_epoch)
            with collective("broadcasting rank 0's weights"):
                broadcast_coalesced([*model.parameters(), *model.buffers()], 0)
            epochs = _Epochs(self, ranks, learner, views, components, agreed)
            with checkpointed(components.gradient_checkpointing, model):
                return run_epochs(
                    here, learner, loaders, starting_epoch, epochs.train, epochs.valid
                )
        finally:
            if epochs is not None:
                epochs.close()
            for view in views.values():
                view.close()


def _ember_loader(name: str, loader: DataLoader[Any]) -> BatchDataLoader[Any, Any]:
    if not isinstance(loader, BatchDataLoader):
        raise TypeError(
            f"DistributedDataParallel shards ember's BatchDataLoader/MultiThreadDataLoader; the "
            f"{name} loader is a {type(loader).__name__}"
        )
    return loader


def _check_same_run(
    ranks: _Ranks,
    learner: Learner[Any],
    views: Mapping[str, ShardedDataLoader[Any]],
    components: TrainingComponents,
    starting_epoch: int,
) -> None:
    """Every rank must run the same training; a difference would hang a collective later."""
    params = [p for _, p in trained_parameters(learner.model)]
    facts = {
        "the starting epoch (is the checkpoint directory visible to every rank?)": starting_epoch,
        "num_epochs": components.num_epochs,
        "grads_accumulation": components.grads_accumulation or 0,
        "the train loader's items": views["train"].num_items(),
        "the train loader's batches": len(views["train"]),
        "the valid loader's items": views["valid"].num_items(),
        "the valid loader's batches": len(views["valid"]),
        "the number of parameters": len(params),
        "the number of weights": sum(p.numel() for p in params),
        "checkpointers": int(components.checkpointer is not None),
        "early stopping": int(components.early_stopping is not None),
    }
    values = torch.tensor(list(facts.values()), dtype=torch.int64)
    bounds = torch.cat([values, -values])
    with collective("checking that every rank runs the same training"):
        dist.all_reduce(bounds, dist.ReduceOp.MAX, group=ranks.cpu)
    highest, lowest = bounds[: len(facts)].tolist(), (-bounds[len(facts) :]).tolist()
    differ = [
        f"{name} ({low} to {high})"
        for name, low, high in zip(facts, lowest, highest, strict=True)
        if low != high
    ]
    if differ:
        raise DistributedError(f"the ranks disagree on {', '.join(differ)}")


class _Epochs:
    """The train and valid splits of one fit, as every rank runs them."""

    def __init__(
        self,
        strategy: DistributedDataParallel,
        ranks: _Ranks,
        learner: Learner[Any],
        views: Mapping[str, ShardedDataLoader[Any]],
        components: TrainingComponents,
        agreed: Interrupter,
    ) -> None:
        self._ranks = ranks
        self._learner = learner
        self._views = views
        self._components = components  # the real ones: the processor, the user's interrupter
        self._agreed = agreed
        self._mean = strategy.loss_reduction == "mean"
        model = learner.model
        self._buffers = list(model.buffers()) if strategy.broadcast_buffers else []
        self._reducer = _GradientReducer(model, int(strategy.bucket_cap_mb * 2**20))

    def close(self) -> None:
        self._reducer.close()

    def train(self, epoch: int) -> None:
        """``train_epoch`` over this rank's shares (same lr, optimizer and event rules)."""
        log.info("Executing training step for epoch %d", epoch)
        learner, ranks = self._learner, self._ranks
        learner.model.train()
        accumulation = self._components.grads_accumulation
        accumulator = GradientsAccumulator() if accumulation is not None else None
        window = 0
        iterator: ShardIterator[Any] = iter(self._views["train"])
        for iteration, batch in enumerate(iterator, start=1):
            progress, shares = iterator.progress(), iterator.shares
            self._sync_buffers()
            self._reducer.prepare(shares[ranks.rank] / sum(shares) if self._mean else 1.0)
            output = learner.train_step(batch) if batch is not None else None
            grads = self._reducer.finish(None if output is None else output.grads)
            if accumulator is None:
                learner.lr_step()
                learner.optimizer_step(grads)
            else:
                accumulator.accumulate(grads)
                window += 1
                if window == accumulation or progress.is_completed:
                    learner.lr_step()
                    learner.optimizer_step(accumulator.grads())
                    window = 0
            item, stop = self._exchange(None if output is None else output.item, shares)
            if ranks.is_main:
                self._components.processor.process_train(
                    ProcessedItem(TrainingItem(item, progress, iteration, learner.lr_current))
                )
            if self._agree(stop):
                break

    def valid(self, epoch: int) -> None:
        """``valid_epoch`` over this rank's shares."""
        log.info("Executing validation step for epoch %d", epoch)
        model = self._learner.model
        model.eval()
        self._sync_buffers()
        with torch.inference_mode():
            iterator: ShardIterator[Any] = iter(self._views["valid"])
            for iteration, batch in enumerate(iterator, start=1):
                progress, shares = iterator.progress(), iterator.shares
                output = None if batch is None else model.inference_step(batch)
                item, stop = self._exchange(output, shares)
                if self._ranks.is_main:
                    self._components.processor.process_valid(
                        ProcessedItem(TrainingItem(item, progress, iteration, None))
                    )
                if self._agree(stop):
                    break

    def _sync_buffers(self) -> None:
        if self._buffers:
            with collective("broadcasting rank 0's buffers"):
                broadcast_coalesced(self._buffers, 0)

    def _exchange(self, item: Any, shares: tuple[int, ...]) -> tuple[Any, int]:
        """After a batch: every rank's stop wish, and the batch's output on rank 0.

        Two collectives, whatever the world size: an all-gather of a small int64 block per
        rank (its stop wish and the shapes of its output's tensors), then a gather of the
        outputs' bytes on rank 0. Returns rank 0's output for the global batch (its own, or
        the parts to merge; None on other ranks) and the stop value for :meth:`_agree`.
        """
        ranks = self._ranks
        wish = ranks.world - ranks.rank if self._components.interrupter.should_stop() else 0
        if ranks.world == 1:
            return item, wish
        names: list[str] = []
        tensors: list[torch.Tensor | None] = []
        if item is not None:
            _merge_for(type(item))  # every rank with a share fails alike on an unusable type
            names = _tensor_fields(item)
            tensors = [getattr(item, name) for name in names]
        header = tensor_header(tensors) if item is not None else []
        if len(header) > _HEADER - 2:
            raise ValueError(
                f"{type(item).__name__} has too many tensor fields or dimensions to send to "
                f"rank 0 (a header of {len(header)} numbers, at most {_HEADER - 2})"
            )
        block = torch.zeros(_HEADER, dtype=torch.int64)
        block[0], block[1] = wish, len(header)
        block[2 : 2 + len(header)] = torch.tensor(header, dtype=torch.int64)
        blocks = [torch.empty_like(block) for _ in range(ranks.world)]
        with collective("exchanging stop wishes and output shapes"):
            dist.all_gather(blocks, block, group=ranks.cpu)
        table = torch.stack(blocks).tolist()
        headers = [row[2 : 2 + row[1]] if row[1] else None for row in table]
        stop = max(row[0] for row in table)
        size = max((payload_size(h) for h in headers[1:] if h is not None), default=0)
        if size == 0:  # only rank 0 has an output
            return (item if ranks.is_main else None), stop
        mine = (
            pack_tensors(tensors, size, ranks.device)
            if item is not None and not ranks.is_main
            else torch.zeros(size, dtype=torch.uint8, device=ranks.device)
        )
        gathered = [torch.empty_like(mine) for _ in range(ranks.world)] if ranks.is_main else None
        with collective("gathering the outputs on rank 0"):
            dist.gather(mine, gathered, dst=0)
        if gathered is None or item is None:
            return None, stop
        parts, sizes = [item], [shares[0]]
        for src in range(1, ranks.world):
            header_src = headers[src]
            if header_src is not None:
                received = unpack_tensors(header_src, gathered[src])
                parts.append(dataclasses.replace(item, **dict(zip(names, received, strict=True))))
                sizes.append(shares[src])
        if len(parts) == 1:
            return item, stop
        return _GlobalBatch(parts, sizes, summed_loss=not self._mean), stop

    def _agree(self, stop: int) -> bool:
        """Stop every rank when any rank wished to (``stop`` names the lowest such rank)."""
        if stop == 0:
            return False
        ranks = self._ranks
        stopper = ranks.world - stop
        reason = self._components.interrupter.message if stopper == ranks.rank else None
        self._agreed.stop(reason or f"rank {stopper} stopped training")
        return True
