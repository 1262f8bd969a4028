"""ember.distributed.spawn: local ranks, their errors, argument checks."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from ember.distributed import DistributedError, spawn
from tests.train.strategy.ddp import helpers as ddp_helpers


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_an_exception_names_its_rank_with_the_traceback() -> None:
    """Rank 0 raises: the error names it first, with its exception; rank 1 (blocked in a
    barrier) is stopped."""
    with pytest.raises(DistributedError) as caught:
        spawn(ddp_helpers.raise_on_rank, 2, 0, timeout=timedelta(seconds=30), join_timeout=90)
    message = str(caught.value)
    assert message.startswith("rank 0 failed first (exit code 1)")
    assert "ValueError: rank 0 refuses" in message
    assert caught.value.exit_codes[0] == 1


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_rank_that_returned_finishes_its_threads_and_exit_handlers_and_exits_0(
    tmp_path: Path,
) -> None:
    """After training under DDP a rank exits 0 (its interpreter's finalisation, where torch's
    gloo objects can abort a process, is skipped), once the thread it left running has ended
    and its atexit handlers have run, as at a normal exit."""
    spawn(
        ddp_helpers.train_then_leave_work_for_the_exit,
        2,
        str(tmp_path),
        timeout=timedelta(seconds=30),
        join_timeout=90,
    )
    for kind in ("exit", "thread"):
        assert [(tmp_path / f"{kind}-{rank}").read_text() for rank in (0, 1)] == ["ran", "ran"]


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_a_hung_rank_is_named_first_not_the_rank_that_failed_waiting_for_it(
    tmp_path: Path,
) -> None:
    """Rank 1 blocks for ever in its 3rd step; rank 0's launch fails after progress_timeout
    (2 s), naming it: spawn's first line names rank 1, which it stopped itself (no exit code
    of it is reported), then rank 0's failure."""
    with pytest.raises(DistributedError) as caught:
        spawn(
            ddp_helpers.block_at_step,
            2,
            str(tmp_path),
            3,
            2.0,
            timeout=timedelta(seconds=30),
            join_timeout=90,
        )
    lines = str(caught.value).splitlines()
    assert lines[:3] == [
        "rank 1 stopped making progress: the other ranks waited for it in a collective",
        "rank 0 failed first (exit code 1)",
        "ranks [1] were stopped",
    ]
    assert "DistributedError: rank 1 made no progress for 2 s" in str(caught.value)
    assert caught.value.exit_codes == {0: 1}


def test_refuses_what_the_new_processes_cannot_run() -> None:
    """A lambda or a local function cannot be imported by a spawned process; sizes are checked."""

    def local() -> None: ...

    with pytest.raises(ValueError, match="importable"):
        spawn(lambda: None, 2)
    with pytest.raises(ValueError, match="importable"):
        spawn(local, 2)
    with pytest.raises(ValueError, match="world_size"):
        spawn(ddp_helpers.raise_on_rank, 0, 0)
    with pytest.raises(ValueError, match="join_timeout"):
        spawn(ddp_helpers.raise_on_rank, 1, 5, join_timeout=0)
