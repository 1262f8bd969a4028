"""What the data-parallel tests of plain models run in their spawned ranks (importable by the
new processes): a plain ``nn.Sequential`` with ``F.mse_loss``, and a model that computes its
own loss from named inputs, under DistributedDataParallel and FullyShardedDataParallel."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    DistributedDataParallel,
    FullyShardedDataParallel,
    Learner,
    LearningResult,
    LossMetric,
    SupervisedTraining,
)
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.fsdp.helpers import full_weights


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))


class OwnLoss(nn.Module):
    """Computes its loss from named inputs and returns it in a dict, as Hugging Face models."""

    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.net(x)
        return {"loss": F.mse_loss(out, labels), "logits": out}


def training(directory: Path, kind: str, strategy: Any = None) -> tuple[SupervisedTraining, Any]:
    """The DDP tests' data and schedule (Adam, lr 1e-2, 2 epochs) for a plain model (``plain``),
    one computing its own loss (``own``), or a plain model with an optimizer factory
    (``factory``, as FSDP needs)."""
    train, valid = ddp_helpers.loaders()
    if kind == "own":  # named inputs: the batches as dicts
        rows = [{"x": x, "labels": [y]} for x, y in ddp_helpers.samples(ddp_helpers.TRAIN_ITEMS, 0)]
        tensors = [{k: torch.tensor(v) for k, v in row.items()} for row in rows]
        train = DataLoaderBuilder().batch_size(8).shuffle(7).build(InMemDataset(tensors))
        rows = [{"x": x, "labels": [y]} for x, y in ddp_helpers.samples(ddp_helpers.VALID_ITEMS, 1)]
        tensors = [{k: torch.tensor(v) for k, v in row.items()} for row in rows]
        valid = DataLoaderBuilder().batch_size(4).build(InMemDataset(tensors))
    builder = (
        SupervisedTraining(directory, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(2)
        .errors_in_result()
    )
    if strategy is not None:
        builder = builder.with_training_strategy(strategy)
    model: nn.Module = OwnLoss() if kind == "own" else mlp()
    if kind == "factory":
        return builder, Learner(model, torch.optim.Adam, 1e-2, loss=F.mse_loss)
    loss = None if kind == "own" else F.mse_loss
    return builder, Learner(model, torch.optim.Adam(model.parameters()), 1e-2, loss=loss)


def _launch(builder: SupervisedTraining, learner: Any) -> LearningResult[Any]:
    result = builder.launch(learner)
    if result.error is not None:
        raise RuntimeError(f"training failed:\n{result.traceback}")
    return result


def gpt2_training(directory: Path, strategy: Any = None) -> tuple[SupervisedTraining, Any]:
    """A tiny GPT-2 from a config (a transformers model, its own loss), checkpointed, with the
    optimizer as a factory (SGD, lr 0.1)."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=32, n_positions=8, n_embd=16, n_layer=2, n_head=2, bos_token_id=0,
        eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(config)
    model.generation_config.max_new_tokens = 5  # a user's setting, which checkpoints keep
    ids = torch.randint(0, 32, (24, 8), generator=torch.Generator().manual_seed(0))
    blocks = [{"input_ids": row, "labels": row} for row in ids]
    train = DataLoaderBuilder().batch_size(8).build(InMemDataset(blocks[:16]))
    valid = DataLoaderBuilder().batch_size(4).build(InMemDataset(blocks[16:]))
    builder = (
        SupervisedTraining(directory, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .errors_in_result()
    )
    if strategy is not None:
        builder = builder.with_training_strategy(strategy)
    # SGD: Adam's normalised step would blow float noise on an unused token's gradient up
    return builder, Learner(model, torch.optim.SGD, 0.1)


def ranks(out_dir: str) -> None:
    """Each kind under DDP (weights saved per rank), the plain one and a GPT-2 under FSDP
    (whole weights saved by rank 0)."""
    out, rank = Path(out_dir), dist.get_rank()
    for kind in ("plain", "own"):
        builder, learner = training(out / f"{kind}-{rank}", kind, DistributedDataParallel())
        result = _launch(builder, learner)
        ddp_helpers.save_weights(out / f"{kind}-rank{rank}.safetensors", result.model)
    strategy = FullyShardedDataParallel(shard=nn.Linear)
    builder, learner = training(out / "fsdp", "factory", strategy)
    weights = full_weights(_launch(builder, learner).model)
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    builder, learner = gpt2_training(out / "gpt2", FullyShardedDataParallel(shard=GPT2Block))
    gpt2_weights = full_weights(_launch(builder, learner).model)
    if rank == 0:
        from safetensors.torch import save_file

        save_file(weights, str(out / "fsdp.safetensors"))
        save_file(gpt2_weights, str(out / "gpt2.safetensors"))
    dist.barrier()
