"""FullyShardedDataParallel's checks that need no process group: each refuses before any
process joins, naming the problem and the fix."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch
from torch import nn

from ember.train import FullyShardedDataParallel, Learner
from ember.train._strategy.fsdp.sharding import device_mesh, mixed_precision, plan_units
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.helpers import Mlp


def test_the_arguments_are_checked_at_the_call() -> None:
    with pytest.raises(TypeError, match="wrapping policy"):
        FullyShardedDataParallel(shard="Linear")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="wrapping policy"):
        FullyShardedDataParallel(shard=())
    with pytest.raises(TypeError, match="reshard_after_forward must be a bool"):
        FullyShardedDataParallel(reshard_after_forward=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="loss_reduction"):
        FullyShardedDataParallel(loss_reduction="max")  # type: ignore[arg-type]
    strategy = FullyShardedDataParallel(shard=(nn.Linear, nn.Tanh), hybrid=True)
    assert "hybrid=True" in repr(strategy)


def test_the_wrapping_policy_picks_submodules_by_class_or_callable() -> None:
    model = Mlp()
    assert plan_units(model, None) == []
    assert plan_units(model, nn.Linear) == ["net.0", "net.3"]
    assert plan_units(model, lambda name, module: name == "net") == ["net"]


def test_a_policy_matching_nothing_fails_the_run_before_it_starts(tmp_path: Path) -> None:
    """No process group is touched: the run's error names the policy and the classes."""
    builder, learner = ddp_helpers.training(tmp_path, 1, FullyShardedDataParallel(shard=nn.Conv2d))
    result = builder.launch(Learner(learner.model, torch.optim.Adam, 1e-2))
    assert isinstance(result.error, ValueError)
    message = str(result.error)
    assert "matches no submodule of Mlp" in message and "Linear" in message


def test_a_built_optimizer_is_refused_it_would_train_the_unsharded_parameters(
    tmp_path: Path,
) -> None:
    """Refused by the strategy's check at launch, before any process joins or file is written."""
    builder, learner = ddp_helpers.training(tmp_path, 1, FullyShardedDataParallel())
    with pytest.raises(ValueError, match="pass the optimizer as a factory"):
        builder.launch(learner)  # Adam built on model.parameters()
    assert not (tmp_path / "experiment.log").exists()


def test_hybrid_needs_the_same_ranks_on_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="not a multiple of LOCAL_WORLD_SIZE=2"):
        device_mesh(torch.device("cpu"), 3, hybrid=True, timeout=timedelta(minutes=1))


def test_precision_maps_to_fsdp_mixed_precision() -> None:
    policy = mixed_precision("bf16-mixed")
    assert policy.param_dtype is torch.bfloat16 and policy.reduce_dtype is torch.float32
    assert mixed_precision("32").param_dtype is None
