"""Exact mid-pass resume under DistributedDataParallel (2 gloo processes on the CPU): a step
run stopped by one rank inside a round checkpoints there, and the resumed run ends equal to an
uninterrupted 2-process run."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from ember.distributed import spawn
from ember.train import DistributedDataParallel, LearningResult
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.test_mid_round import logs

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]


def step_run(out: Path, name: str, *, stop_unit: int | None = None) -> LearningResult[Any]:
    """9 optimizer steps of 2 batches over 49 shuffled items (4 steps a pass), a validation
    every 3 steps and a checkpoint every 2 (so some inside rounds), dropout with a different
    RNG per rank; ``stop_unit``: rank 1 asks to stop in its ``stop_unit``-th batch."""
    rank = dist.get_rank()
    builder, learner = ddp_helpers.training(out / name, 3, DistributedDataParallel(), dropout=0.3)
    builder = builder.max_steps(9).validate_every(steps=3).checkpoint_every(steps=2)
    builder = builder.grads_accumulation(2)
    if stop_unit is None and (out / name).exists():
        builder = builder.resume_latest()
    interrupter = builder.interrupter()
    if stop_unit is not None and rank == 1:
        learner.model.on_train_step = lambda unit: (
            interrupter.stop("asked") if unit == stop_unit else None
        )
    torch.manual_seed(100 + rank)  # ranks draw different dropout masks
    result = builder.launch(learner)
    if result.error is not None:
        raise RuntimeError(f"training failed:\n{result.traceback}")
    dist.barrier()  # the next run reads what rank 0 wrote
    return result


def stop_and_resume(out_dir: str) -> None:
    out, rank = Path(out_dir), dist.get_rank()
    full = step_run(out, "full")
    ddp_helpers.save_weights(out / f"full-rank{rank}.safetensors", full.model)
    stopped = step_run(out, "chain", stop_unit=12)
    points = sorted(path.name for path in (out / "chain" / "checkpoint").glob("step-*"))
    ddp_helpers.write_result(out / f"stopped-rank{rank}.json", stopped, points=points)
    resumed = step_run(out, "chain")
    ddp_helpers.save_weights(out / f"resumed-rank{rank}.safetensors", resumed.model)


def test_a_ddp_step_run_stopped_mid_pass_resumes_exactly(tmp_path: Path) -> None:
    """Rank 1 asks to stop in the first batch of round 3 (its wish reaches rank 0 with the
    outputs, at the end of pass 2: step 8); both ranks write one mid-round checkpoint there and
    stop. Resumed from it, every rank ends with exactly the weights of the uninterrupted
    2-process run, and rank 0's metric logs are byte for byte the same."""
    spawn(stop_and_resume, 2, str(tmp_path), timeout=timedelta(seconds=30), join_timeout=120)
    for rank in (0, 1):
        stopped = json.loads((tmp_path / f"stopped-rank{rank}.json").read_text())
        assert stopped["stop_reason"] == ("rank 1 stopped training" if rank == 0 else "asked")
        assert stopped["points"] == ["step-8"] and stopped["last_epoch"] == 2
        full = load_file(tmp_path / f"full-rank{rank}.safetensors")
        resumed = load_file(tmp_path / f"resumed-rank{rank}.safetensors")
        for name, tensor in full.items():
            assert torch.equal(resumed[name], tensor), (rank, name)
    assert logs(tmp_path / "chain") == logs(tmp_path / "full")
