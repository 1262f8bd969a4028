"""ember.runs.load on a DistributedDataParallel run (2 gloo processes on the CPU): rank 0's
directory reads back as exactly what rank 0's loggers were given, steps included."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

from ember.distributed import spawn
from ember.runs import load
from ember.train import DistributedDataParallel, InMemoryMetricLogger
from tests.train.strategy.ddp import helpers as ddp_helpers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]


def ddp_run(out_dir: str) -> None:
    """A step run with accumulation under DDP; rank 0 writes what its loggers got as JSON."""
    out = Path(out_dir)
    memory = InMemoryMetricLogger()
    builder, learner = ddp_helpers.training(out / "run", 3, DistributedDataParallel())
    builder = builder.max_steps(7).validate_every(steps=3).grads_accumulation(2)
    result = builder.with_metric_logger(memory).launch(learner)
    if result.error is not None:
        raise RuntimeError(f"training failed:\n{result.traceback}")
    if dist.get_rank() == 0:
        values = [
            [v.split.value, v.epoch, v.step, v.name, v.value, v.weight, v.final]
            for v in memory.numbers
        ]
        (out / "logged.json").write_text(json.dumps(values))


def test_a_ddp_run_reads_back_from_rank_0s_directory(tmp_path: Path) -> None:
    """Every batch value (a global batch each) and epoch value, with its global step, as rank
    0's loggers got them; the run is finished after its 3 validations."""
    spawn(ddp_run, 2, str(tmp_path), timeout=timedelta(seconds=30), join_timeout=120)
    logged = json.loads((tmp_path / "logged.json").read_text())
    run = load(tmp_path / "run")
    order = {"train": 0, "valid": 1}
    expected = sorted(
        (entry for entry in logged if not entry[6]), key=lambda e: (order[e[0]], e[1], e[3])
    )
    items = [[r.split, r.epoch, r.step, r.metric, r.value, r.weight] for r in run.rows("item")]
    assert items == [entry[:6] for entry in expected]
    assert [r.step for r in run.rows("item") if r.split == "train"][-1] == 7
    epochs = [[r.split, r.epoch, r.step, r.metric, r.value] for r in run.rows()]
    finals = sorted((e for e in logged if e[6]), key=lambda e: (order[e[0]], e[1], e[3]))
    assert epochs == [entry[:5] for entry in finals]
    assert (run.last_epoch, run.finished) == (3, True)
