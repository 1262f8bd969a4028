"""What the FSDP tests run in their spawned ranks (importable by the new processes)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import torch
import torch.distributed as dist
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from ember.train import FullyShardedDataParallel, GradNormMetric, Learner, SupervisedTraining
from ember.train._checkpoint import sharded
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._precision import Precision
from ember.train._step import current_step
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.helpers import Mlp


def training(
    directory: Path,
    epochs: int,
    strategy: Any = None,
    *,
    dropout: float = 0.0,
    resume: int | None = None,
    batch: int = 8,
) -> tuple[SupervisedTraining, Learner[Mlp]]:
    """The DDP tests' run (Adam, lr 1e-2, checkpoints kept) with the optimizer as a factory,
    as FSDP needs it (it is built on the sharded parameters)."""
    builder, learner = ddp_helpers.training(
        directory, epochs, strategy, dropout=dropout, resume=resume, batch=batch
    )
    return builder, Learner(learner.model, torch.optim.Adam, 1e-2)


def full_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole tensors of a sharded model (a collective: every rank calls it)."""
    options = StateDictOptions(full_state_dict=True)
    state = get_model_state_dict(model, options=options)
    return {
        k: v.detach().cpu().contiguous() for k, v in state.items() if isinstance(v, torch.Tensor)
    }


def run(builder: SupervisedTraining, learner: Learner[Mlp], out: Path, name: str) -> Mlp:
    """Train; rank 0 writes the whole weights as ``{name}.safetensors``; the sharded model."""
    result = builder.launch(learner)
    if result.error is not None:
        raise RuntimeError(f"training {name} failed:\n{result.traceback}")
    weights = full_weights(result.model)
    if dist.get_rank() == 0:
        save_file(weights, str(out / f"{name}.safetensors"))
    dist.barrier()
    return result.model


def one_rank(out_dir: str) -> None:
    """W: one epoch sharded over a world of 1, checkpointed (``equal_and_exact`` resumes it)."""
    run(
        *training(Path(out_dir) / "w", 1, FullyShardedDataParallel(shard=nn.Linear)),
        Path(out_dir),
        "w1",
    )


def equal_and_exact(out_dir: str) -> None:
    """A: compare with one process (sharded per Linear); C: stopped after epoch 1 and resumed
    to A's 3; D: clipping, mean accumulation and gradient checkpointing; E: bf16-mixed; G: a
    global batch of 7; W: a 1-rank checkpoint resumed; then A's model, sharded already, trained
    again."""
    out = Path(out_dir)
    sharded_model = None
    for name, epochs, resume in (("a", 3, None), ("c", 1, None), ("c", 3, 1)):
        strategy = FullyShardedDataParallel(shard=nn.Linear)
        model = run(*training(out / name, epochs, strategy, resume=resume), out, f"{name}{epochs}")
        sharded_model = sharded_model or model
    runs: tuple[tuple[str, Precision], ...] = (("d", "32"), ("e", "bf16-mixed"))
    for name, precision in runs:
        builder, learner = training(out / name, 2, FullyShardedDataParallel(shard=nn.Linear))
        builder = builder.clip_grad_norm(0.05).grads_accumulation(2, mean=True)
        builder = (
            builder.metrics(GradNormMetric()).gradient_checkpointing(["net.0"]).precision(precision)
        )
        with counting_reduce_scatters() as calls:
            run(builder, learner, out, name)
        (out / f"{name}-scatters-rank{dist.get_rank()}.json").write_text(json.dumps(calls))
    # G: a global batch of 7 that 2 ranks cannot divide (shares of 4 and 3 items), a callable
    # wrapping policy and the gathered parameters kept from forward to backward
    strategy = FullyShardedDataParallel(
        shard=lambda name, module: isinstance(module, nn.Linear), reshard_after_forward=False
    )
    run(*training(out / "g", 1, strategy, batch=7), out, "g")
    # W: one_rank's checkpoint of epoch 1 (a world of 1), resumed by 2 ranks to epoch 2
    run(*training(out / "w", 2, FullyShardedDataParallel(shard=nn.Linear), resume=1), out, "w2")
    assert sharded_model is not None
    builder, _ = training(out / "twice", 1, FullyShardedDataParallel())
    result = builder.launch(Learner(sharded_model, torch.optim.Adam, 1e-2))
    ddp_helpers.write_result(out / f"twice-rank{dist.get_rank()}.json", result)


@contextlib.contextmanager
def counting_reduce_scatters() -> Iterator[list[tuple[int, bool]]]:
    """The reduce-scatters FSDP launches in training steps, as (unit, closing) of each."""
    calls: list[tuple[int, bool]] = []
    reduce_scatter = dist.reduce_scatter_single

    def counting(*args: Any, **kwargs: Any) -> Any:
        step = current_step()
        if step is not None:  # inside a training step's backward
            calls.append((step.iteration, step.closing))
        return reduce_scatter(*args, **kwargs)

    dist.reduce_scatter_single = counting
    try:
        yield calls
    finally:
        dist.reduce_scatter_single = reduce_scatter


class _DyingShards(FileCheckpointer):
    """Rank 1's shard writer, which kills its process in the middle of epoch 2's write."""

    def save(self, epoch: int, record: Any) -> Any:
        if epoch == 2 and dist.get_rank() == 1:
            self.path(epoch).write_bytes(b"half a shard")
            os._exit(3)
        return super().save(epoch, record)


def die_while_writing(out_dir: str) -> None:
    """Rank 1 dies while it writes its shards of epoch 2."""
    builder, learner = training(Path(out_dir) / "run", 3, FullyShardedDataParallel())
    with patch.object(sharded, "FileCheckpointer", _DyingShards):
        result = builder.launch(learner)
    ddp_helpers.write_result(Path(out_dir) / f"rank{dist.get_rank()}.json", result)


def finished_twice(out_dir: str) -> None:
    """One sharded epoch, then ``resume_latest()`` on the finished run: each rank writes the
    result and its learner's weights and Adam state (whole tensors: the model is not placed)."""
    out, rank = Path(out_dir), dist.get_rank()
    run(*training(out / "run", 1, FullyShardedDataParallel(shard=nn.Linear)), out, "trained")
    builder, learner = training(out / "run", 1, FullyShardedDataParallel(shard=nn.Linear))
    result = builder.resume_latest().launch(learner)
    ddp_helpers.write_result(out / f"again-rank{rank}.json", result)
    state = learner.optimizer.state_dict()["state"]
    adam = {
        f"{param}/{name}": value
        for param, values in state.items()
        for name, value in values.items()
    }
    save_file({**learner.model.state_dict(), **adam}, str(out / f"again-rank{rank}.safetensors"))
