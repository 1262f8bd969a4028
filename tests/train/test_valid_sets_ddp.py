"""Several validation sets under DistributedDataParallel (2 gloo processes on the CPU): each set
is sharded over the ranks and its values equal one process's; the ranks must agree on the sets."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from ember.data import DataLoaderBuilder, InMemDataset
from ember.distributed import spawn
from ember.train import (
    Callback,
    CliMetricsRenderer,
    DistributedDataParallel,
    Learner,
    LossMetric,
    SupervisedTraining,
)
from tests.train.fixtures import batcher
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.expect import assert_losses_equal

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]


class Values(Callback):
    """Every validation's values, as this process's callbacks get them."""

    def __init__(self) -> None:
        self.values: dict[int, dict[str, float]] = {}

    def on_validation_end(self, epoch: int, values: Mapping[str, float]) -> None:
        self.values[epoch] = dict(values)


def two_sets(directory: Path, strategy: Any = None, noisy_items: int = 10) -> Any:
    """ddp_helpers' model and data (13 clean valid items in batches of 4: rank 1's last share is
    empty) validated on a second set too, "noisy", of ``noisy_items`` items in batches of 4."""
    torch.manual_seed(0)
    model = ddp_helpers.Mlp()
    train, clean = ddp_helpers.loaders()
    items = [(x, -y) for x, y in ddp_helpers.samples(noisy_items, 2)]
    noisy = DataLoaderBuilder(batcher).batch_size(4).build(InMemDataset(items))
    builder = (
        SupervisedTraining(directory, train, {"clean": clean, "noisy": noisy})
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .num_epochs(2)
        .errors_in_result()  # every rank's error is read from its result
    )
    if strategy is not None:
        builder = builder.with_training_strategy(strategy)
    return builder, Learner(model, torch.optim.Adam(model.parameters()), 1e-2)


def job(out_dir: str) -> None:
    out, rank = Path(out_dir), dist.get_rank()
    values = Values()
    builder, learner = two_sets(out / "ddp", DistributedDataParallel())
    result = builder.with_callbacks(values).launch(learner)
    if result.error is not None:
        raise RuntimeError(f"training failed:\n{result.traceback}")
    ddp_helpers.save_weights(out / f"rank{rank}.safetensors", result.model)
    (out / f"values-rank{rank}.json").write_text(json.dumps(values.values), encoding="utf-8")
    dist.barrier()
    builder, learner = two_sets(
        out / "disagree", DistributedDataParallel(), noisy_items=10 if rank == 0 else 11
    )
    refused = builder.launch(learner)
    ddp_helpers.write_result(out / f"disagree-rank{rank}.json", refused)


def test_each_set_is_sharded_and_equals_one_process(tmp_path: Path) -> None:
    """2 ranks: both sets' logs equal one process's (the clean set's last share of rank 1 is
    empty), every rank's on_validation_end gets rank 0's values of both sets, the weights are
    one process's; a rank whose noisy set differs is refused on every rank, naming it."""
    spawn(job, 2, str(tmp_path), timeout=timedelta(seconds=30), join_timeout=120)
    single, learner = two_sets(tmp_path / "single")
    values = Values()
    assert single.with_callbacks(values).launch(learner).error is None
    for epoch in (1, 2):
        for file in ("Loss.log", "Loss_(noisy).log"):
            relative = Path("valid", f"epoch-{epoch}", file)
            assert_losses_equal(tmp_path / "ddp" / relative, tmp_path / "single" / relative)
    ranks = [json.loads((tmp_path / f"values-rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0] == ranks[1]
    for epoch in (1, 2):
        assert sorted(ranks[0][str(epoch)]) == ["Loss", "Loss (noisy)"]
        assert ranks[0][str(epoch)] == pytest.approx(values.values[epoch], abs=1e-6)
    for rank in (0, 1):
        weights = load_file(tmp_path / f"rank{rank}.safetensors")
        for name, tensor in learner.model.state_dict().items():
            torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-6)
        refused = json.loads((tmp_path / f"disagree-rank{rank}.json").read_text())
        assert refused["error"].startswith("DistributedError: the ranks disagree on")
        assert "the other validation sets' items (10 to 11)" in refused["error"]
