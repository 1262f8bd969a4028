"""What the callbacks' DDP test runs in its spawned ranks (importable by the new processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ember.train import EMA, Callback, RunView
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.strategy.ddp.helpers import training


class Seen(Callback):
    """Records the steps this rank saw; rank 1 alone asks to stop at step ``stop_at``."""

    def __init__(self, stop_at: int) -> None:
        self.stop_at = stop_at
        self.steps: list[int] = []
        self.mains: set[bool] = set()
        self.epochs_validated: list[int] = []
        self.values: list[dict[str, float]] = []

    def on_after_optimizer_step(self, step: RunView) -> None:
        self.steps.append(step.optimizer_steps)
        self.mains.add(step.is_main_process)
        if step.rank == 1 and step.optimizer_steps == self.stop_at:
            step.stop(f"rank 1's callback at step {self.stop_at}")

    def on_validation_end(self, epoch: int, values: Any) -> None:
        self.epochs_validated.append(epoch)
        self.values.append(dict(values))


def stop_on_one_rank(out_dir: str) -> None:
    """Two runs: rank 1's callback stops at step 3 (report_every=1: a stop takes effect at
    once) and at step 3 with report_every=4 (at the end of the chunk); an EMA on each rank."""
    out, rank = Path(out_dir), dist.get_rank()
    record: dict[str, Any] = {}
    for name, every in (("now", 1), ("chunk", 4)):
        builder, learner = training(out / name, 3, DistributedDataParallel(report_every=every))
        seen, ema = Seen(3), EMA(0.5)
        result = builder.with_callbacks(seen, ema).launch(learner)
        assert result.error is None, result.traceback
        assert ema.averaged is not None
        record[name] = {
            "steps": seen.steps,
            "mains": sorted(seen.mains),
            "stop_reason": result.stop_reason,
            "validated": seen.epochs_validated,
            "ema": [float(t.sum()) for t in ema.averaged.module.parameters()],
        }
        dist.barrier()
    # a run to its end: every rank validates and gets rank 0's values
    builder, learner = training(out / "full", 2, DistributedDataParallel())
    seen = Seen(10_000)
    assert builder.with_callbacks(seen).launch(learner).error is None
    record["full"] = {"validated": seen.epochs_validated, "values": seen.values}
    (out / f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
    torch.distributed.barrier()
