"""DistributedDataParallel over 2 gloo processes on the CPU ("data parallel")."""

from __future__ import annotations

import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from ember.distributed import DistributedError, spawn
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.expect import assert_losses_equal, assert_weights_equal, losses

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]

TIMEOUT = timedelta(seconds=30)


def result(path: Path) -> dict[str, Any]:
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job for the equality and resume tests: rank start-up is the slow part."""
    out = tmp_path_factory.mktemp("ddp")
    spawn(ddp_helpers.equal_and_exact, 2, str(out), timeout=TIMEOUT, join_timeout=120)
    return out


def test_weights_and_loss_logs_equal_one_process(two_ranks: Path, tmp_path: Path) -> None:
    """2 ranks end with the weights of one process with the same global batch (the shares
    include an empty one) and log the same Loss lines; the replicas are bit-identical."""
    builder, learner = ddp_helpers.training(tmp_path / "single", 3, workers=1)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    expected = learner.model.state_dict()
    rank0 = load_file(two_ranks / "a-rank0.safetensors")
    rank1 = load_file(two_ranks / "a-rank1.safetensors")
    for name, tensor in expected.items():
        torch.testing.assert_close(rank0[name], tensor, rtol=0, atol=1e-6)
        assert torch.equal(rank0[name], rank1[name])
    for split in ("train", "valid"):
        for epoch in (1, 2, 3):
            relative = Path(split, f"epoch-{epoch}", "Loss.log")
            assert_losses_equal(two_ranks / "a-0" / relative, tmp_path / "single" / relative)


def test_clipping_mean_accumulation_and_mixed_precision_under_ddp(
    two_ranks: Path, tmp_path: Path
) -> None:
    """clip_grad_norm and grads_accumulation(mean=True) act on the reduced gradients: 2 ranks
    equal one process; bf16-mixed trains on every rank and keeps the replicas identical;
    16-mixed's gradient scaler unscales the reduced gradients (the same on every rank, so
    every rank skips or takes the same steps): identical replicas, close to one process's
    16-mixed run (float16 rounds the shares' forward differently from the whole batch's)."""
    builder, learner = ddp_helpers.training(tmp_path / "single", 2)
    single = builder.clip_grad_norm(0.05).grads_accumulation(2, mean=True).launch(learner)
    assert single.error is None, single.traceback
    rank0 = load_file(two_ranks / "d-rank0.safetensors")
    for name, tensor in learner.model.state_dict().items():
        torch.testing.assert_close(rank0[name], tensor, rtol=0, atol=1e-6)
    bf16 = [load_file(two_ranks / f"e-rank{rank}.safetensors") for rank in (0, 1)]
    initial = ddp_helpers.training(tmp_path / "fresh", 1)[1].model.state_dict()
    for name, tensor in bf16[0].items():
        assert torch.equal(tensor, bf16[1][name]) and torch.isfinite(tensor).all()
    assert any(not torch.equal(bf16[0][n], initial[n]) for n in initial)
    builder, learner = ddp_helpers.training(tmp_path / "single16", 2)
    builder = builder.clip_grad_norm(0.05).grads_accumulation(2, mean=True).precision("16-mixed")
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    fp16 = [load_file(two_ranks / f"h-rank{rank}.safetensors") for rank in (0, 1)]
    for name, tensor in learner.model.state_dict().items():
        assert torch.equal(fp16[0][name], fp16[1][name])
        torch.testing.assert_close(fp16[0][name], tensor, rtol=0, atol=1e-2)


def test_a_world_size_that_does_not_divide_the_global_batch_still_equals_one_process(
    two_ranks: Path, tmp_path: Path
) -> None:
    """A global batch of 7 over 2 ranks: shares of 4 and 3 items, each loss weighted by
    world x share / 7 before torch's reducer averages: one process's weights and Loss lines
    (nothing padded or dropped)."""
    builder, learner = ddp_helpers.training(tmp_path / "single", 1, batch=7)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    assert_weights_equal(
        [two_ranks / f"g-rank{rank}.safetensors" for rank in (0, 1)], learner.model
    )
    relative = Path("train", "epoch-1", "Loss.log")
    ours = assert_losses_equal(two_ranks / "g-0" / relative, tmp_path / "single" / relative)
    assert len(ours) == 7 + 1  # 7 batches of 7 items, the epoch's line


def test_only_rank_0_writes_files(two_ranks: Path) -> None:
    """Rank 1's run directory holds no file (its checkpoint folder, made by the user's
    builder, stays empty); rank 0's has the logs and the checkpoints."""
    assert [p for p in (two_ranks / "a-1").rglob("*") if p.is_file()] == []
    assert (two_ranks / "a-0" / "experiment.log").exists()
    assert (two_ranks / "a-0" / "checkpoint" / "manifest-3.json").exists()


def test_resume_is_bit_identical_to_an_uninterrupted_run(two_ranks: Path) -> None:
    """With dropout and a different RNG per rank: stop after epoch 1, resume to 3, and every
    rank ends with exactly the weights of the uninterrupted DDP run; the logs agree too."""
    for rank in (0, 1):
        uninterrupted = load_file(two_ranks / f"b3-rank{rank}.safetensors")
        resumed = load_file(two_ranks / f"c3-rank{rank}.safetensors")
        for name, tensor in uninterrupted.items():
            assert torch.equal(resumed[name], tensor), (rank, name)
    for split in ("train", "valid"):
        for epoch in (2, 3):
            relative = Path(split, f"epoch-{epoch}", "Loss.log")
            assert losses(two_ranks / "c" / relative) == losses(two_ranks / "b" / relative)


def test_stops_are_agreed_and_an_error_ends_every_rank_fast(tmp_path: Path) -> None:
    """Rank 1's interrupter stops both ranks after the same batch; rank 0's early stopping
    stops both after the same epoch; an exception in rank 1's step fails rank 0 at once."""
    spawn(ddp_helpers.agreements, 2, str(tmp_path), timeout=TIMEOUT, join_timeout=120)
    interrupt = [result(tmp_path / f"interrupt-rank{rank}.json") for rank in (0, 1)]
    assert [r["last_epoch"] for r in interrupt] == [1, 1]
    assert interrupt[0]["stop_reason"] == "rank 1 stopped training"
    assert interrupt[1]["stop_reason"] == "rank 1 wants to stop"
    assert all(r["error"] is None for r in interrupt)
    early = [result(tmp_path / f"early-rank{rank}.json") for rank in (0, 1)]
    assert [r["last_epoch"] for r in early] == [2, 2]
    assert [r["stop_reason"] for r in early] == ["enough after epoch 2"] * 2
    error = [result(tmp_path / f"error-rank{rank}.json") for rank in (0, 1)]
    assert error[1]["error"] == "ValueError: rank 1's step failed"
    assert error[0]["error"].startswith("DistributedError: rank 0:")
    assert error[0]["seconds"] < TIMEOUT.total_seconds() / 2  # not the collective timeout


def test_every_rank_returns_the_same_result_facts(tmp_path: Path) -> None:
    """The fault: rank 1's result.best_epoch was 2 while rank 0's was 3 (it read the
    checkpoints while rank 0 still wrote them) and it had no summary; every rank's result now
    holds rank 0's facts: best epoch, checkpoints and summary."""
    spawn(ddp_helpers.result_facts, 2, str(tmp_path), timeout=TIMEOUT, join_timeout=120)
    rank0, rank1 = (result(tmp_path / f"facts-rank{rank}.json") for rank in (0, 1))
    assert rank0["error"] is None and rank0["last_epoch"] == 3
    assert rank0["best_epoch"] is not None and rank0["summary"] is not None
    assert list(rank0["checkpoints"]) == sorted({"3", str(rank0["best_epoch"])}, key=int)
    assert rank1 == rank0


def test_a_dead_rank_fails_the_job_fast_naming_it(tmp_path: Path) -> None:
    """Rank 1's process exits with code 3 at its 3rd step: spawn raises, naming rank 1 and
    its exit code, well within the collective timeout + 10 s."""
    started = time.monotonic()
    with pytest.raises(DistributedError, match=r"rank 1 failed first \(exit code 3\)") as caught:
        spawn(ddp_helpers.die_at_step, 2, str(tmp_path), 3, timeout=TIMEOUT, join_timeout=120)
    elapsed = time.monotonic() - started
    assert elapsed < TIMEOUT.total_seconds() + 10
    assert caught.value.exit_codes[1] == 3


def test_a_hung_rank_is_named_within_the_progress_timeout(tmp_path: Path) -> None:
    """Rank 1 sleeps 12 s in its 3rd step (progress_timeout 2 s, collective timeout 30 s):
    rank 0 stops within seconds with a DistributedError naming rank 1, not itself; both
    launches return, with no ember thread left."""
    spawn(
        ddp_helpers.hang_at_step, 2, str(tmp_path), 3, 12.0, 2.0, timeout=TIMEOUT, join_timeout=120
    )
    waiting, hung = (result(tmp_path / f"hang-rank{rank}.json") for rank in (0, 1))
    assert waiting["error"].startswith(
        "DistributedError: rank 1 made no progress for 2 s: rank 0 reached the gradient "
        "all-reduce of epoch 1, iteration 3 and rank 1 did not"
    )
    assert waiting["seconds"] < 12  # named before rank 1 woke up, long before the timeout
    assert hung["error"] is not None and hung["error"].startswith("DistributedError")
    assert waiting["threads"] == [] and hung["threads"] == []
