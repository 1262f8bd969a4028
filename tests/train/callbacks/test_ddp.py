"""Callbacks under DistributedDataParallel: called on every rank, one stop for all."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from ember.distributed import spawn
from tests.train.callbacks import ranks

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(200)]


def test_every_rank_is_called_and_one_ranks_stop_stops_all(tmp_path: Path) -> None:
    """Each rank's callbacks see every optimizer step; rank 1's stop at step 3 ends both ranks
    at step 3 (report_every=1) or at the end of its chunk, step 4 (report_every=4), with rank 1's
    reason on rank 1 and "rank 1 stopped training" on rank 0; the EMAs agree; every rank gets
    rank 0's validation values."""
    spawn(ranks.stop_on_one_rank, 2, str(tmp_path), timeout=timedelta(seconds=60), join_timeout=180)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    for name, last in (("now", 3), ("chunk", 4)):
        assert rank0[name]["steps"] == rank1[name]["steps"] == list(range(1, last + 1))
        assert rank0[name]["mains"] == [True] and rank1[name]["mains"] == [False]
        assert rank1[name]["stop_reason"] == "rank 1's callback at step 3"
        assert rank0[name]["stop_reason"] == "rank 1 stopped training"
        assert rank0[name]["ema"] == rank1[name]["ema"]
        assert rank0[name]["validated"] == rank1[name]["validated"] == []
    assert rank0["full"]["validated"] == rank1["full"]["validated"] == [1, 2]
    assert rank0["full"]["values"] == rank1["full"]["values"]
    assert set(rank0["full"]["values"][0]) == {"Loss"}
