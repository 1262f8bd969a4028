"""DistributedDataParallel on torch's reducer: accumulation windows, chunked outputs, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch.distributed as dist

from ember.distributed import spawn
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.expect import assert_losses_equal, assert_weights_equal, losses
from tests.train.strategy.ddp.test_local import one_rank  # noqa: F401  # the fixture
from tests.train.strategy.ddp.test_training import TIMEOUT


@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_accumulation_reduces_only_at_a_window_s_last_unit(tmp_path: Path) -> None:
    """grads_accumulation(2) over 2 ranks: the gradients are all-reduced once per window, at
    its last unit (torch's reducer: one collective, the model's one bucket; the tail batch,
    with an empty share on rank 1, by hand: gradients and presence flags), never inside it;
    weights and Loss lines (reported every 3 units, so chunks end mid-pass) equal one
    process's."""
    spawn(ddp_helpers.accumulation, 2, str(tmp_path), timeout=TIMEOUT, join_timeout=120)
    builder, learner = ddp_helpers.training(tmp_path / "single", 2)
    single = builder.grads_accumulation(2).launch(learner)
    assert single.error is None, single.traceback
    # units 1-7 of an epoch (7: one item, rank 1's share is empty): collectives in each step
    reduced = [[1, False, 0], [2, True, 1], [3, False, 0], [4, True, 1], [5, False, 0]]
    reduced += [[6, True, 1], [7, True, 0]]
    for rank in (0, 1):
        calls = json.loads((tmp_path / f"f-calls-rank{rank}.json").read_text(encoding="utf-8"))
        assert calls["by_hand"] == [[7, True], [7, True]] * 2
        assert calls["reduced"] == (reduced if rank == 0 else reduced[:-1]) * 2
    assert_weights_equal([tmp_path / f"f-rank{rank}.safetensors" for rank in (0, 1)], learner.model)
    for split in ("train", "valid"):
        for epoch in (1, 2):
            relative = Path(split, f"epoch-{epoch}", "Loss.log")
            assert_losses_equal(tmp_path / "f-0" / relative, tmp_path / "single" / relative)


@pytest.mark.usefixtures("one_rank")
def test_a_model_already_under_torch_s_replicate_is_refused(tmp_path: Path) -> None:
    """replicate applied by the user, then ember's DDP: a clear error, before any step."""
    from torch.distributed._composable.replicate import replicate

    builder, learner = ddp_helpers.training(tmp_path / "run", 1, DistributedDataParallel())
    replicate(learner.model)
    result = builder.launch(learner)
    assert isinstance(result.error, ValueError)
    assert "already under torch's replicate" in str(result.error)
    assert dist.is_initialized()  # refused before joining anything: the group is untouched


def test_report_every_is_checked() -> None:
    with pytest.raises(ValueError, match="report_every"):
        DistributedDataParallel(report_every=0)


@pytest.mark.distributed
@pytest.mark.timeout(150)
def test_torch_loaders_give_disjoint_shares_seeing_every_item_once(tmp_path: Path) -> None:
    """A TorchDataLoader under DDP, 2 ranks, one epoch of 49 items. Plain shuffled sampler
    (seeded generator): ember shards every global batch of 8, the ranks read disjoint shares
    and the weights equal one process's. DistributedSampler (4 a rank): torch pads rank 1 with
    a duplicate; ember leaves it out of the shares, so every item is read (and so counted in
    the gradients and the metrics) exactly once."""
    spawn(ddp_helpers.torch_loaders, 2, str(tmp_path), timeout=TIMEOUT, join_timeout=120)
    for sampler in ("plain", "distributed"):
        seen = [
            json.loads((tmp_path / f"{sampler}-seen-rank{rank}.json").read_text("utf-8"))
            for rank in (0, 1)
        ]
        assert not set(seen[0]) & set(seen[1])
        assert sorted(seen[0] + seen[1]) == list(range(ddp_helpers.TRAIN_ITEMS))
        lines = losses(tmp_path / f"{sampler}-0" / "train" / "epoch-1" / "Loss.log")
        assert len(lines) == 7 + 1  # a line per global batch (8 items, or 4 a rank), the epoch
    builder, learner, _ = ddp_helpers.torch_training(tmp_path / "single", "plain")
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    weights = [tmp_path / f"plain-rank{rank}.safetensors" for rank in (0, 1)]
    assert_weights_equal(weights, learner.model)
    relative = Path("train", "epoch-1", "Loss.log")
    assert_losses_equal(tmp_path / "plain-0" / relative, tmp_path / "single" / relative)
