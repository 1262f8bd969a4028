"""What the DDP evaluation test runs in its spawned ranks (importable by the new processes)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    EvaluatorBuilder,
    LossMetric,
    RegressionOutput,
    predict,
)
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.fixtures import Batch, batcher
from tests.train.strategy.ddp.helpers import Mlp, samples

TEST_ITEMS = 13  # batches of 4: shares 2+2, 2+2, 2+2 and 1+0 (rank 1's last share is empty)


class PerSampleMlp(Mlp):
    """Per-sample losses: the logged Loss weighs every item, so counting one twice shows."""

    def inference_step(self, batch: Batch) -> RegressionOutput:
        out = self(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y, reduction="none")[:, 0], out, batch.y)


def model() -> PerSampleMlp:
    torch.manual_seed(0)
    return PerSampleMlp()


def test_loader() -> DataLoader[Batch]:
    return DataLoaderBuilder(batcher).batch_size(4).build(InMemDataset(samples(TEST_ITEMS, 1)))


def evaluate(out_dir: str) -> None:
    """Every rank evaluates, then predicts; each writes what it got back."""
    rank = dist.get_rank()
    stream = io.StringIO()
    summary = (
        EvaluatorBuilder(Path(out_dir) / f"run-{rank}")
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(stream, interval=1e9))
        .summary()
        .with_strategy(DistributedDataParallel())
        .build(model())
        .eval("test", test_loader())
    )
    outputs = predict(model(), test_loader(), strategy=DistributedDataParallel())
    record = {
        "loss": summary.value("Loss"),
        "lines": stream.getvalue().splitlines(),
        "predictions": [output.output[:, 0].tolist() for output in outputs],
    }
    (Path(out_dir) / f"rank{rank}.json").write_text(json.dumps(record), encoding="utf-8")
