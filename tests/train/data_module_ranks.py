"""What the data module's DDP test runs in its spawned ranks (importable by the new processes)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ember.data import DataLoaderBuilder, DataModule, InMemDataset
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.fixtures import TinyRegressor, batcher, samples


class Counted(DataModule):
    """Writes a line per call into ``calls`` (one file for the job: how often each ran)."""

    def __init__(self, calls: Path) -> None:
        self.calls = calls

    def _note(self, what: str) -> None:
        with open(self.calls, "a", encoding="utf-8") as file:
            file.write(f"{what} {os.environ.get('RANK', '0')}\n")

    def prepare(self) -> None:
        self._note("prepare")
        (self.calls.parent / "prepared").write_text("data", encoding="utf-8")

    def setup(self) -> None:
        assert (self.calls.parent / "prepared").read_text(encoding="utf-8") == "data"
        self._note("setup")
        self.items = samples(32)

    def train_loader(self) -> Any:
        return DataLoaderBuilder(batcher).batch_size(8).build(InMemDataset(self.items))

    def valid_loader(self) -> Any:
        return DataLoaderBuilder(batcher).batch_size(8).build(InMemDataset(self.items[:8]))


def prepare_once_setup_per_rank(out_dir: str) -> None:
    out = Path(out_dir)
    torch.manual_seed(0)
    model = TinyRegressor()
    training = (
        SupervisedTraining(out / "run", Counted(out / "calls.txt"))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_training_strategy(DistributedDataParallel())
    )
    result = training.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1)))
    assert result.error is None, result.traceback
    dist.barrier()
