"""Distributed data parallel on ``torch.distributed`` (DESIGN §9, B9).

One process per device (``torchrun --nproc-per-node N``, torchrun's rendezvous across nodes, or
:func:`ember.distributed.spawn`), each running the same script. The user's code is the one of a
single process: the loaders' batch size is the **global** batch, and every rank reads its share
of every global batch (:class:`~ember.data._shard.ShardedDataLoader`). Per global batch, on every
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

This module holds the strategy and its epoch loop; the pieces it assembles live next to it:
``ddp_ranks`` (a rank's place in the job), ``ddp_gradients`` (the bucketed gradient all-reduce),
``ddp_outputs`` (outputs sent to rank 0 and merged into the global batch's), ``ddp_agreement``
(rank 0's events and early stopping, agreed by every rank) and ``ddp_checkpoint`` (rank 0
writes, with every rank's RNG state; every rank restores).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

import torch
import torch.distributed as dist

from ember._errors import DistributedError
from ember.data import BatchDataLoader, DataLoader
from ember.data._shard import ShardedDataLoader, ShardIterator
from ember.distributed._messages import broadcast_coalesced
from ember.distributed._processes import DEFAULT_TIMEOUT, collective, init_from_environment
from ember.train._events import ProcessedItem, TrainingItem
from ember.train._gradient_checkpointing import checkpointed
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._step import GradientsAccumulator, trained_parameters
from ember.train._strategy.base import FitResult, TrainingComponents, resume, run_epochs
from ember.train._strategy.ddp.agreement import AgreedEarlyStopping, MainEvents, WorkerEvents
from ember.train._strategy.ddp.checkpoint import DistributedCheckpointer
from ember.train._strategy.ddp.gradients import GradientReducer
from ember.train._strategy.ddp.outputs import exchange_outputs, merge_outputs, register_output_merge
from ember.train._strategy.ddp.ranks import Ranks

__all__ = ["DistributedDataParallel", "merge_outputs", "register_output_merge"]

log = logging.getLogger("ember.train")


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
        self._ranks: Ranks | None = None
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

    def _setup(self) -> Ranks:
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
        self._ranks = Ranks(dist.get_rank(), dist.get_world_size(), device, cpu)
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
        ranks: Ranks,
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
            processor=MainEvents(components.processor, ranks)
            if ranks.is_main
            else WorkerEvents(ranks),
            early_stopping=None if early is None else AgreedEarlyStopping(early, ranks),
            checkpointer=None
            if checkpointer is None
            else DistributedCheckpointer(checkpointer, ranks),
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
    ranks: Ranks,
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
        ranks: Ranks,
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
        self._reducer = GradientReducer(model, int(strategy.bucket_cap_mb * 2**20))

    def close(self) -> None:
        self._reducer.close()

    def train(self, epoch: int) -> None:
        """``train_epoch`` over this rank's shares (same lr, optimizer and event rules)."""
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
        """After a batch: rank 0's output of the global batch (None on other ranks), and the
        stop value for :meth:`_agree` (``world - rank`` of the lowest rank that wished to stop,
        0 if none), from one exchange of every rank's stop wish and output."""
        ranks = self._ranks
        wish = ranks.world - ranks.rank if self._components.interrupter.should_stop() else 0
        return exchange_outputs(ranks, item, wish, shares, summed_loss=not self._mean)

    def _agree(self, stop: int) -> bool:
        """Stop every rank when any rank wished to (``stop`` names the lowest such rank)."""
        if stop == 0:
            return False
        ranks = self._ranks
        stopper = ranks.world - stop
        reason = self._components.interrupter.message if stopper == ranks.rank else None
        self._agreed.stop(reason or f"rank {stopper} stopped training")
        return True
