"""Fully sharded data parallel on torch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

Like :class:`~ember.train.DistributedDataParallel`, one process per device runs the same
script, the loaders' batch size is the **global** batch and every rank reads its share of every
global batch. Unlike it, no rank holds the whole model: ``fully_shard`` turns every parameter
into a DTensor sharded along its first dimension over the mesh (``sharding.py``), and so are
its gradient and its optimizer state (the optimizer is built on the sharded parameters: pass it
as a factory). Per global batch, on every rank::

    agree through the store that every rank got here          # a hung rank is named
    train_step(my share), its loss x world x my share / global batch   # from_loss applies it
        forward: each unit's parameters all-gathered, freed after it (reshard_after_forward)
        backward: each unit's gradients reduce-scattered: averaged over ranks into the shards,
                  which makes the global batch's gradient (inside an accumulation window only
                  at its last micro-batch: before it FSDP sums them unsharded, no collective)
    clipping: the total norm over the DTensor gradients (one all-reduce), as in one process
    optimizer step on the local shards
    exchange the outputs and the stop wishes (as DistributedDataParallel does)

A rank whose share of a batch is empty (the tail of an epoch) still runs forward and backward,
on its previous share with a loss factor of zero: FSDP's collectives need every rank, and the
zero contributes nothing (its output is not reported). Its random draws are undone (so that a
run resumed at such a tail, whose process has no previous share and runs its share of the
split's first items instead, stays exact); a BatchNorm's running statistics are updated.

Checkpoints are sharded (``_checkpoint/sharded.py``): every rank writes its own shards, rank 0
the index and the manifest, last.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import torch
from torch import nn

if TYPE_CHECKING:  # torch's FSDP costs most of a second to import: only a sharded run pays it
    from torch.distributed.fsdp import FSDPModule

from ember._errors import DataLoaderError, DistributedError
from ember.data import DataLoader, Progress
from ember.data._rank_view import RankView
from ember.distributed._processes import DEFAULT_TIMEOUT
from ember.train._checkpoint.sharded import ShardedRecords, write_shards
from ember.train._learner import Learner
from ember.train._precision import Precision
from ember.train._step import InferenceStep, TrainOutput, current_step, step_context
from ember.train._strategy.base import Step
from ember.train._strategy.collectives import (
    broadcast_coalesced,
    collective,
    collective_error,
    raised_by_collective,
)
from ember.train._strategy.ddp.ranks import Ranks
from ember.train._strategy.ddp.strategy import DistributedDataParallel, DistributedRun
from ember.train._strategy.fsdp.sharding import (
    WrapPolicy,
    check_policy,
    device_mesh,
    mixed_precision,
    plan_units,
    shard_model,
)

__all__ = ["FullyShardedDataParallel", "FullyShardedRun"]


class FullyShardedDataParallel(DistributedDataParallel):
    """Sharded data-parallel training over a ``torch.distributed`` job (see the module doc).

    The process group, ``backend``, ``timeout``, ``init_method``, ``device``,
    ``loss_reduction`` and ``progress_timeout`` are those of
    :class:`~ember.train.DistributedDataParallel`. ``shard`` is the wrapping policy: the
    submodules that become FSDP units (a module class, a tuple of them, or a callable
    ``policy(name, module) -> bool``; None: the whole model is one unit). With
    ``reshard_after_forward`` each unit frees its gathered parameters after its forward and
    gathers them again for backward (less memory, one more all-gather). ``hybrid`` shards within
    each node (``LOCAL_WORLD_SIZE`` ranks) and replicates across nodes (a 2-D mesh).
    The run's ``precision("bf16-mixed")`` becomes FSDP's ``MixedPrecisionPolicy``: parameters
    gathered and computed in bfloat16, gradients reduced and kept in float32.
    """

    _TORCH_LOADERS = False  # a user's TorchDataLoader is refused: no TorchShares here

    def __init__(
        self,
        backend: str | None = None,
        *,
        shard: WrapPolicy = None,
        reshard_after_forward: bool = True,
        hybrid: bool = False,
        timeout: timedelta = DEFAULT_TIMEOUT,
        init_method: str | None = None,
        device: torch.device | str | None = None,
        loss_reduction: Literal["mean", "sum"] = "mean",
        progress_timeout: timedelta | None = None,
    ) -> None:
        super().__init__(
            backend,
            timeout=timeout,
            init_method=init_method,
            device=device,
            loss_reduction=loss_reduction,
            progress_timeout=progress_timeout,
        )
        for name, flag in (("reshard_after_forward", reshard_after_forward), ("hybrid", hybrid)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        self.shard = check_policy(shard)
        self.reshard_after_forward = reshard_after_forward
        self.hybrid = hybrid
        self.precision: Precision = "32"

    def __repr__(self) -> str:
        return (
            f"FullyShardedDataParallel(backend={self.backend!r}, device={self.device}, "
            f"shard={self.shard!r}, hybrid={self.hybrid})"
        )

    def use_precision(self, precision: Precision) -> None:
        """The run's precision (``launch`` tells it before :meth:`start`)."""
        self.precision = precision

    def check(self, learner: Learner[Any]) -> None:
        """One optimizer, built by a factory on the sharded parameters (refused before any
        process joins)."""
        if isinstance(learner.optimizer_or_factory, dict):
            raise ValueError(
                "FullyShardedDataParallel trains one optimizer (its sharded checkpoints hold "
                f"one), got {sorted(learner.optimizer_or_factory)}"
            )
        if isinstance(learner.optimizer_or_factory, torch.optim.Optimizer):
            raise ValueError(
                "FullyShardedDataParallel replaces the model's parameters with sharded ones: "
                "pass the optimizer as a factory, e.g. Learner(model, "
                "lambda params: torch.optim.Adam(params), lr), so that it is built on them"
            )

    def start(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> FullyShardedRun:
        """Join (or initialise) the process group, shard the model over the mesh (the
        optimizer is built on the sharded parameters after this); this rank's shares of the
        loaders."""
        units = plan_units(model, self.shard)
        ranks = self._setup()
        try:
            model.to(ranks.device)
            with collective("broadcasting rank 0's weights"):
                broadcast_coalesced([*model.parameters(), *model.buffers()], 0)
            mesh = device_mesh(ranks.device, ranks.world, hybrid=self.hybrid, timeout=self.timeout)
            shard_model(
                model,
                units,
                mesh,
                reshard_after_forward=self.reshard_after_forward,
                precision=mixed_precision(self.precision),
            )
            return FullyShardedRun(self, ranks, model, self._rank_views(loaders, ranks))
        except BaseException:
            self._abandon()
            raise


class FullyShardedRun(DistributedRun):
    """One rank's sharded run: its shares, FSDP's collectives, the agreements of
    :class:`DistributedRun` (reports, decisions, the progress watch)."""

    def __init__(
        self,
        strategy: FullyShardedDataParallel,
        ranks: Ranks,
        model: nn.Module,
        views: Mapping[str, RankView],
    ) -> None:
        # DistributedRun's own __init__ builds a gradient reducer: FSDP reduces in backward
        self._agreements(strategy, ranks, model, views)
        self._last_share: dict[str, Any] = {}  # the last non-empty share of each split
        self._syncing = True  # fully_shard's default: reduce-scatter in every backward

    def train_pass(self) -> Iterator[tuple[Any, Progress]]:
        """This rank's share of every global batch (a stand-in for an empty one)."""
        return self._stand_in(super().train_pass(), "train")

    def valid_pass(self, name: str) -> Iterator[tuple[Any, Progress]]:
        """This rank's share of every global batch of the loader ``name`` (a stand-in for an
        empty one)."""
        return self._stand_in(super().valid_pass(name), name)

    def _stand_in(
        self, pass_: Iterator[tuple[Any, Progress]], split: str
    ) -> Iterator[tuple[Any, Progress]]:
        for batch, progress in pass_:
            if batch is not None:
                self._last_share[split] = batch
                yield _Share(batch, True), progress
            else:
                yield _Share(self._previous_share(split), False), progress

    def _previous_share(self, split: str) -> Any:
        """What a stand-in runs: this rank's last share of ``split``, or, when this process has
        none yet (a run resumed at the tail of a pass), its share of a batch of the split's
        first items (a copy of the loader: the run's loader does not move)."""
        if split not in self._last_share:
            rank, world = self._ranks.rank, self._ranks.world
            refused = DistributedError(
                f"rank {rank} has no share of the first {split} batch: the global batch must "
                f"hold at least one item per rank ({world})"
            )
            try:
                probe = self._views[split].slice(0, world)
            except (DataLoaderError, ValueError) as error:  # a stream, or fewer items
                raise refused from error
            try:
                share = next(iter(probe), None)
            finally:
                probe.close()
            if share is None:
                raise refused
            self._last_share[split] = share
        return self._last_share[split]

    def train_step(self, learner: Learner[Any], batch: Any) -> Sequence[TrainOutput[Any]]:
        """``train_step`` on this rank's share, its loss weighted by the share (zero for a
        stand-in); at a window's last unit FSDP reduce-scatters the gradients into the shards
        during backward."""
        share: _Share = batch
        shares = self._shares
        self._sync_buffers()
        # FSDP averages the ranks' gradients: world x share / global batch makes the mean the
        # global batch's gradient (a summed loss: world x, the sum over ranks)
        world = self._ranks.world
        weight = world * shares[self._ranks.rank] / sum(shares) if self._mean else float(world)
        if not share.real:
            weight = 0.0
        self._watch.arrive("the forward all-gather")
        context = current_step()
        if context is None:
            raise DistributedError("FullyShardedRun.train_step runs inside the training loop")
        factor = context.loss_factor
        if weight != 1.0:
            factor = weight if factor is None else factor * weight
        self._sync_gradients(context.closing)
        # the user's step sees its own batch, and TrainOutput.from_loss weights its loss
        with (
            step_context(dataclasses.replace(context, batch=share.batch, loss_factor=factor)),
            _sharded_collectives(),
            _random_kept(share, self._ranks.device),
        ):
            output = learner.train_step(share.batch)
        if output.grads.owner is not self._model:
            raise DistributedError(
                "FullyShardedDataParallel reduces the gradients of the loss's backward pass: "
                "build train_step's output with TrainOutput.from_loss(self, loss, item)"
            )
        return (output,) if share.real else ()

    def _sync_gradients(self, sync: bool) -> None:
        """Reduce-scatter this unit's gradients (the window's last unit), or keep them unsharded
        and summed in FSDP until then (torch's ``set_requires_gradient_sync``: FSDP1's
        ``no_sync``)."""
        if sync != self._syncing:
            cast("FSDPModule", self._model).set_requires_gradient_sync(sync)
            self._syncing = sync

    def inference_step(self, batch: Any, step: Step | None = None) -> Any:
        """The model's ``inference_step`` (or ``step``) on this rank's share (None for a
        stand-in, whose forward only takes part in the all-gathers), without gradients,
        outside inference mode."""
        share: _Share = batch
        self._watch.arrive("the forward all-gather")
        run = cast("InferenceStep[Any, Any]", self._model).inference_step if step is None else step
        # outside inference mode (the loop validates in it): FSDP keeps the buffers its
        # all-gathers fill, and buffers made in inference mode cannot be written by the train
        # steps after it (a run resumed at the end of a training pass validates first)
        with (
            torch.inference_mode(False),
            torch.no_grad(),
            _sharded_collectives(),
            _random_kept(share, self._ranks.device),
        ):
            output = run(share.batch)
        return output if share.real else None

    def write_shards(
        self, directory: Path, epoch: int, learner: Learner[Any]
    ) -> ShardedRecords | None:
        """Every rank writes its shards of the model and ``learner``'s optimizer; rank 0 gets
        the index records and every rank's file (None on the other ranks)."""
        return write_shards(directory, epoch, learner, self)

    def close(self, error: BaseException | None = None) -> None:
        """Close the shares; after an ``error`` on this rank, tear the process group down.
        The model goes back to reducing its gradients in every backward (a stop may have
        dropped a window in the middle)."""
        self._sync_gradients(True)
        self._watch.close(failed=error is not None)
        for view in self._views.values():
            view.close()
        if error is not None:
            self._strategy._abandon()


@contextlib.contextmanager
def _sharded_collectives() -> Iterator[None]:
    """A failed all-gather or reduce-scatter of FSDP's inside the user's step (a peer died or
    failed: its connection closed) becomes a DistributedError saying so; the user's own
    errors pass unchanged."""
    try:
        yield
    except RuntimeError as error:
        if raised_by_collective(error):
            raise collective_error("FSDP's all-gathers and reduce-scatters", error) from error
        raise


def _random_kept(share: _Share, device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """A stand-in's random draws are undone (``torch.random.fork_rng``): whatever batch it
    runs, the rank's generators go on as if it had not run, so a run resumed where a stand-in
    runs another batch than the uninterrupted run's stays exact."""
    if share.real:
        return contextlib.nullcontext()
    cuda = [device] if device.type == "cuda" else []
    return torch.random.fork_rng(devices=cuda, device_type=device.type)


@dataclasses.dataclass(frozen=True, slots=True)
class _Share:
    """A rank's share of a batch; ``real`` is False for the stand-in of an empty share."""

    batch: Any
    real: bool
