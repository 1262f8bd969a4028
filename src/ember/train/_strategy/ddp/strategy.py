"""Distributed data parallel on ``torch.distributed``.

One process per device (``torchrun --nproc-per-node N``, torchrun's rendezvous across nodes, or
:func:`ember.distributed.spawn`), each running the same script. The user's code is the one of a
single process: the loaders' batch size is the **global** batch, and every rank reads its share
of every global batch (:class:`~ember.data.ShardedDataLoader`). Per global batch, on every
rank::

    shares = every rank's share size of this batch (rank 0's is the largest, never empty)
    broadcast rank 0's buffers (BatchNorm statistics, ...)
    train_step(my share)      # as its backward produces gradients, buckets of them are
                              # all-reduced: sum over ranks of grad x share / global batch
                              # (an empty share skips the step and contributes zeros)
    lr_step, optimizer_step   # the same reduced gradients everywhere: replicas stay equal
    every report_every units and at a pass's end, one exchange:
        all-gather (CPU group)    # every rank's stop wish and its outputs' shapes
        gather on rank 0          # the outputs' bytes (tensors only, never pickle); rank 0
                                  # emits a ProcessedItem per global batch with its output
                                  # (merged lazily, on the metrics thread)
        stop if any rank wished   # every rank stops after the same batch

The collectives that follow user code inside a pass (buffers, gradients, exchanges) time out
after ``progress_timeout``; when one does, the ranks find out through the job's store which of
them never got there, and name it (``progress``). Nothing of this runs per step: torch's
reducer all-reduces with its own C++ communication hook.

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

This module holds the strategy and its run (what the loop in ``train/_loop.py`` calls); the
pieces it assembles live next to it: ``ranks`` (a rank's place in the job and its process
groups), ``gradients`` (torch's gradient reducer), ``progress`` (a hung rank named) and
``outputs`` (outputs sent to rank 0 and merged into the global batch's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any, Literal, TypeVar, cast

import torch
import torch.distributed as dist
from torch import nn

from ember._checks import check_positive_int
from ember._errors import DistributedError
from ember.data import DataLoader, Progress
from ember.data._rank_view import RankView, RankViewIterator, rank_view
from ember.distributed._processes import DEFAULT_TIMEOUT, init_from_environment
from ember.train._learner import Learner
from ember.train._precision import Precision
from ember.train._step import (
    InferenceStep,
    TrainOutput,
    current_step,
    step_context,
    trained_parameters,
)
from ember.train._strategy.base import Step
from ember.train._strategy.collectives import (
    broadcast_bytes,
    broadcast_coalesced,
    collective,
    gather_bytes,
)
from ember.train._strategy.ddp.gradients import (
    TorchReducer,
    check_not_distributed,
    raised_by_autograd,
)
from ember.train._strategy.ddp.outputs import exchange_outputs
from ember.train._strategy.ddp.progress import ProgressWatch
from ember.train._strategy.ddp.ranks import Ranks, gloo_group

__all__ = ["DistributedDataParallel", "DistributedRun"]

log = logging.getLogger("ember.train")
T = TypeVar("T")


class DistributedDataParallel:
    """Data-parallel training over the processes of a ``torch.distributed`` job (see module doc).

    Uses the default process group if one exists (``torchrun`` + the user's
    ``init_process_group``, or :func:`ember.distributed.spawn`), else initialises it from
    torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
    ``MASTER_PORT``) or ``init_method``, with ``backend`` (default ``nccl`` when CUDA is
    available, else ``gloo``) and ``timeout`` for every collective. The device is
    ``cuda:LOCAL_RANK`` with nccl, the CPU with gloo, unless ``device`` is given.

    ``loss_reduction`` says how the step's loss reduces over its batch's items: ``"mean"``
    (each share's loss weighted by world x share / global batch, so that torch's average over
    the ranks is the global batch's gradient) or ``"sum"`` (weighted by the world size: the
    sum). Torch's reducer all-reduces the gradients in buckets of ``bucket_cap_mb``. With
    ``broadcast_buffers`` rank 0's buffers are copied to every rank before each step and each
    validation, as torch's DDP does. Outputs and stop wishes reach rank 0 every
    ``report_every`` units of work (and at the end of each pass): one exchange per chunk, so a
    stop takes effect at the end of the chunk in which a rank asked for it.

    A rank that makes no progress for ``progress_timeout`` (default: a fifth of ``timeout``)
    while the others wait for it, hung in its step or its data loader, ends the run with a
    :class:`~ember.distributed.DistributedError` naming it, long before the collective
    timeout (``_strategy/ddp/progress.py``).
    """

    _TORCH_LOADERS = True  # whether a user's TorchDataLoader is sharded (TorchShares)

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
        progress_timeout: timedelta | None = None,
        report_every: int = 16,
    ) -> None:
        if backend is not None and not isinstance(backend, str):
            raise TypeError(f"backend must be a str or None, got {type(backend).__name__}")
        if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
            raise ValueError(f"timeout must be a positive timedelta, got {timeout!r}")
        if loss_reduction not in ("mean", "sum"):
            raise ValueError(f"loss_reduction must be 'mean' or 'sum', got {loss_reduction!r}")
        if not bucket_cap_mb > 0:
            raise ValueError(f"bucket_cap_mb must be > 0, got {bucket_cap_mb}")
        if progress_timeout is not None and (
            not isinstance(progress_timeout, timedelta)
            or not timedelta(0) < progress_timeout <= timeout
        ):
            raise ValueError(
                "progress_timeout must be None or a positive timedelta no longer than timeout "
                f"({timeout}), got {progress_timeout!r}"
            )
        self.backend = backend
        self.timeout = timeout
        self.init_method = init_method
        self.device = torch.device(device) if device is not None else None
        self.loss_reduction = loss_reduction
        self.bucket_cap_mb = bucket_cap_mb
        self.broadcast_buffers = broadcast_buffers
        self.progress_timeout = progress_timeout or timeout / 5
        self.report_every = check_positive_int("report_every", report_every)
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

    def start(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> DistributedRun:
        """Join (or initialise) the process group; the model on this rank's device, this
        rank's shares of the loaders, torch's reducer."""
        check_not_distributed(model)
        ranks = self._setup()
        try:
            model.to(ranks.device)
            return DistributedRun(self, ranks, model, self._rank_views(loaders, ranks))
        except BaseException:
            self._abandon()
            raise

    def _rank_views(
        self, loaders: Mapping[str, DataLoader[Any]], ranks: Ranks
    ) -> dict[str, RankView]:
        """This rank's view of every loader, on its device (``ember.data``'s ``rank_view``)."""
        return {
            name: rank_view(
                loader,
                ranks.device,
                ranks.rank,
                ranks.world,
                name=name,
                strategy=type(self).__name__,
                torch_loaders=self._TORCH_LOADERS,
            )
            for name, loader in loaders.items()
        }

    def check(self, learner: Learner[Any]) -> None:
        """Any learner: every rank steps the same reduced gradients."""

    def join(self) -> None:
        """Initialise the process group now if needed (a data module's ``prepare`` runs on
        local rank 0 while the other ranks wait for it)."""
        self._setup()

    def use_precision(self, precision: Precision) -> None:
        """Autocast is the loop's, and torch's reducer reduces in the gradients' dtype."""

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
        gloo = "gloo" in dist.get_backend()
        # headers, flags and RNG states are small CPU tensors: gloo carries them (ranks.py)
        cpu = None if gloo else gloo_group(self.timeout)
        watched_cpu = gloo_group(self.progress_timeout)
        self._world_group = dist.group.WORLD
        self._ranks = Ranks(
            dist.get_rank(),
            dist.get_world_size(),
            device,
            cpu,
            watched_cpu,
            watched_cpu if gloo else None,
        )
        return self._ranks

    def _abandon(self) -> None:
        """After an error on this rank: tear the group down so the others fail now."""
        self._ranks = None
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # already failing: the first error is the one to report
                log.debug("destroying the process group failed", exc_info=True)


class DistributedRun:
    """One rank's run: its shares of every global batch, torch's reducer, the agreements."""

    def __init__(
        self,
        strategy: DistributedDataParallel,
        ranks: Ranks,
        model: nn.Module,
        views: Mapping[str, RankView],
    ) -> None:
        self._agreements(strategy, ranks, model, views)
        model = self._model
        self._reducer = TorchReducer(model, ranks, strategy.bucket_cap_mb)
        with collective("broadcasting rank 0's buffers"):
            broadcast_coalesced(list(model.buffers()), 0)

    def _agreements(
        self,
        strategy: DistributedDataParallel,
        ranks: Ranks,
        model: nn.Module,
        views: Mapping[str, RankView],
    ) -> None:
        """The state every distributed run keeps, whatever reduces its gradients: the shares,
        the chunk of outputs not exchanged yet, the stop wishes, the progress watch."""
        self._strategy = strategy
        self._ranks = ranks
        self._views = views
        self._model = model
        self._mean = strategy.loss_reduction == "mean"
        self._buffers = list(model.buffers()) if strategy.broadcast_buffers else []
        self._shares: tuple[int, ...] = ()
        self._last = False  # the unit just yielded is its pass's last
        self._chunk: list[Any] = []  # this rank's outputs of the units not exchanged yet
        self._chunk_shares: list[tuple[int, ...]] = []
        self._wish = 0
        self.replicas = (model,)
        self.loaders: Mapping[str, DataLoader[Any]] = dict(views)
        self._watch = ProgressWatch(ranks, strategy.progress_timeout)

    @property
    def rank(self) -> int:
        """This process's rank."""
        return self._ranks.rank

    def train_pass(self) -> Iterator[tuple[Any, Progress]]:
        """This rank's share (or None) of every global batch; the global progress."""
        return self._shares_of(self._views["train"])

    def valid_pass(self, name: str) -> Iterator[tuple[Any, Progress]]:
        """This rank's share (or None) of every global batch of the loader ``name``."""
        self._sync_buffers()
        return self._shares_of(self._views[name])

    def _shares_of(self, view: RankView) -> Iterator[tuple[Any, Progress]]:
        iterator: RankViewIterator = view.__iter__()  # iter() loses the type
        for batch in iterator:
            self._shares = iterator.shares
            progress = iterator.progress()
            self._last = progress.is_completed
            yield batch, progress

    def train_step(self, learner: Learner[Any], batch: Any) -> Sequence[TrainOutput[Any]]:
        """``train_step`` on this rank's share; at the window's last unit torch's reducer
        all-reduces the gradients while backward runs (an empty share contributes zeros)."""
        model, shares, ranks = self._model, self._shares, self._ranks
        self._sync_buffers()
        context = current_step()
        closing = context is None or context.closing
        by_torch = closing and min(shares) > 0
        if by_torch:
            self._watch.reached("the gradient all-reduce")
            self._reducer.prepare()
        output = None
        if batch is not None:
            # torch's reducer averages over the ranks: weight this share's loss so that the
            # average is the global batch's gradient (1.0, no change, for equal shares)
            weight = ranks.world * (shares[ranks.rank] / sum(shares) if self._mean else 1.0)
            # the loop's context is current already: only a weighted one is entered
            weighted: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
            if context is not None and weight != 1.0:
                factor = weight * (context.loss_factor or 1.0)
                weighted = step_context(dataclasses.replace(context, loss_factor=factor))
            try:
                with weighted:
                    output = learner.train_step(batch)
            except RuntimeError as error:
                if by_torch and raised_by_autograd(error):  # the reducer's all-reduce failed
                    raise self._watch.explain(error) from error
                raise
            if output.grads and output.grads.owner is not model:
                raise DistributedError(
                    f"train_step returned gradients for {sorted(output.grads)} that backward did "
                    "not write into .grad: DistributedDataParallel reduces gradients as backward "
                    "produces them; build the output with TrainOutput.from_loss"
                )
        if by_torch:
            self._reducer.check_finished(batch is not None)
        elif closing:
            with self._watch.watching("the gradient all-reduce"):
                self._reducer.all_reduce_by_hand()
        return () if output is None else (output,)

    def inference_step(self, batch: Any, step: Step | None = None) -> Any:
        """The model's ``inference_step`` (or ``step``) on this rank's share (None for an
        empty one)."""
        if batch is None:
            return None
        if step is None:  # the model was checked when it was placed
            step = cast("InferenceStep[Any, Any]", self._model).inference_step
        return step(batch)

    def after_optimizer_step(self) -> None:
        """Nothing: every rank applied the same reduced gradients."""

    def report(self, items: Sequence[Any], stop: bool) -> tuple[Sequence[Any], int | None]:
        """Keep the unit's output; every ``report_every`` units (and at a pass's end) one
        exchange: every rank's stop wish, and the chunk's outputs merged on rank 0."""
        ranks = self._ranks
        if stop:
            self._wish = max(self._wish, ranks.world - ranks.rank)
        in_pass = bool(self._shares)  # a unit of a pass, not the question between two rounds
        if in_pass:
            self._chunk.append(items[0] if items else None)
            self._chunk_shares.append(self._shares)
            self._shares = ()
            if len(self._chunk) < self._strategy.report_every and not self._last:
                return [], None
        merged, highest = exchange_outputs(
            ranks,
            self._chunk,
            self._wish,
            self._chunk_shares,
            summed_loss=not self._mean,
            # right after user code: watched; between rounds rank 0 may still be writing a
            # checkpoint while the others wait, which the job's timeout allows
            watch=self._watch if in_pass else None,
        )
        self._chunk, self._chunk_shares, self._wish = [], [], 0
        stopper = None if highest == 0 else ranks.world - highest
        return (merged if ranks.is_main else []), stopper

    def decide(self, value: T) -> T:
        """Rank 0's JSON ``value`` on every rank."""
        message = json.dumps(value).encode("utf-8") if self._ranks.is_main else None
        with collective("agreeing with rank 0"):
            answer = broadcast_bytes(message, 0, group=self._ranks.cpu)
        decided: T = json.loads(answer.decode("utf-8"))
        return decided

    def gather(self, value: Any) -> list[Any] | None:
        """Every rank's JSON ``value`` on rank 0, in rank order."""
        with collective("gathering on rank 0"):
            parts = gather_bytes(json.dumps(value).encode("utf-8"), 0, group=self._ranks.cpu)
        return None if parts is None else [json.loads(part) for part in parts]

    def check_same(self, facts: Mapping[str, int]) -> None:
        """Every rank must run the same training; a difference would hang a collective later."""
        params = [p for _, p in trained_parameters(self._model)]
        facts = {
            **facts,
            "the number of parameters": len(params),
            "the number of weights": sum(p.numel() for p in params),
        }
        values = torch.tensor(list(facts.values()), dtype=torch.int64)
        bounds = torch.cat([values, -values])
        with collective("checking that every rank runs the same training"):
            dist.all_reduce(bounds, dist.ReduceOp.MAX, group=self._ranks.cpu)
        highest, lowest = bounds[: len(facts)].tolist(), (-bounds[len(facts) :]).tolist()
        differ = [
            f"{name} ({low} to {high})"
            for name, low, high in zip(facts, lowest, highest, strict=True)
            if low != high
        ]
        if differ:
            raise DistributedError(f"the ranks disagree on {', '.join(differ)}")

    def close(self, error: BaseException | None = None) -> None:
        """Release torch's reducer (its hooks leave the parameters) and close the shares; after
        an ``error`` on this rank, tear the process group down so the other ranks fail at once."""
        self._reducer.close()
        self._watch.close(failed=error is not None)
        for view in self._views.values():
            view.close()
        if error is not None:
            self._strategy._abandon()

    def _sync_buffers(self) -> None:
        if self._buffers:
            with self._watch.watching("broadcasting rank 0's buffers"):
                broadcast_coalesced(self._buffers, 0, group=self._ranks.watched)
