"""A rank that dies or raises during validation fails the others at once, and rank 0 finishes
its run directory first: the error in experiment.log, the lock released (DDP and FSDP)."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from ember._rundir.layout import LOCK
from ember.distributed import DistributedError, spawn
from tests.train.strategy.ddp import helpers as ddp_helpers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(90)]


@pytest.mark.parametrize("sharded", [False, True], ids=["ddp", "fsdp"])
@pytest.mark.parametrize("how", ["die", "raise"])
def test_a_rank_lost_in_validation_fails_rank_0_at_once_which_finishes_its_run(
    tmp_path: Path, sharded: bool, how: str
) -> None:
    """Rank 1 is SIGKILLed (or raises) in its 2nd validation step: spawn names it first; rank
    0's launch returns within seconds (its progress_timeout is 30 s), its experiment.log ends
    with the DistributedError and the attempt's end line, and the lock is gone."""
    with pytest.raises(DistributedError) as caught:
        spawn(
            ddp_helpers.fail_in_validation,
            2,
            str(tmp_path),
            sharded,
            how,
            timeout=timedelta(seconds=60),
            join_timeout=80,
        )
    first = "killed by SIGKILL" if how == "die" else "exit code 1"
    assert str(caught.value).startswith(f"rank 1 failed first ({first})")
    failed_at, returned_at = (
        float((tmp_path / name).read_text()) for name in ("failed-at", "returned-at")
    )
    assert returned_at - failed_at < 15  # not progress_timeout (30 s) later
    run = tmp_path / "run"
    log = (run / "experiment.log").read_text(encoding="utf-8")
    assert "ERROR ember.train: Training failed" in log
    last = log.rstrip().splitlines()[-1]
    assert re.search(r"Attempt of pid \d+ ended: training failed \(DistributedError: rank 0", last)
    assert not (run / LOCK).exists()
