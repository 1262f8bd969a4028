"""DDP evaluation over 2 gloo processes counts every item exactly once."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ember._rundir.metric_logs import NumericEntry
from ember.distributed import spawn
from ember.train import predict
from tests.train.evaluation import ddp_helpers
from tests.train.strategy.ddp.helpers import samples

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job for both tests: rank start-up is the slow part."""
    out = tmp_path_factory.mktemp("ddp-eval")
    spawn(ddp_helpers.evaluate, 2, str(out), timeout=timedelta(seconds=30), join_timeout=120)
    return out


def test_two_ranks_count_each_item_once(two_ranks: Path) -> None:
    """13 items over 2 ranks: rank 0 logs weights summing to 13 and the whole-set mean; rank 1
    gets the same value back and writes nothing."""
    tmp_path = two_ranks
    rows = samples(ddp_helpers.TEST_ITEMS, 1)
    x = torch.tensor([row[0] for row in rows])
    y = torch.tensor([[row[1]] for row in rows])
    with torch.inference_mode():
        expected = float(F.mse_loss(ddp_helpers.model()(x), y))
    records = [json.loads((tmp_path / f"rank{r}.json").read_text("utf-8")) for r in (0, 1)]
    for record in records:
        assert record["loss"] == pytest.approx(expected, rel=1e-6)
    lines = (tmp_path / "run-0" / "test" / "test" / "Loss.log").read_text("utf-8").splitlines()
    entries = [NumericEntry.parse(line) for line in lines]
    assert [entry.weight for entry in entries[:-1]] == [4, 4, 4, 1]
    assert entries[-1].final and entries[-1].value == pytest.approx(expected, rel=1e-6)
    assert "Starting test 'test' with 13 items." in records[0]["lines"]
    assert records[1]["lines"] == []
    assert [p for p in (tmp_path / "run-1").rglob("*") if p.is_file()] == []


def test_two_ranks_predict_each_item_once_in_order(two_ranks: Path) -> None:
    """predict with DDP: rank 0 gets the 4 global batches' outputs, 13 rows in dataset order,
    equal to one process's; rank 1 gets none."""
    records = [json.loads((two_ranks / f"rank{r}.json").read_text("utf-8")) for r in (0, 1)]
    expected = [
        out.output[:, 0].tolist() for out in predict(ddp_helpers.model(), ddp_helpers.test_loader())
    ]
    assert [len(batch) for batch in records[0]["predictions"]] == [4, 4, 4, 1]
    for ours, theirs in zip(records[0]["predictions"], expected, strict=True):
        assert ours == pytest.approx(theirs, abs=1e-6)
    assert records[1]["predictions"] == []
