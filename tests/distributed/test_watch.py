"""How spawn reports a job it stopped: the rank to look at first, never one it stopped itself."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from ember.distributed._watch import Watch
from tests.distributed import helpers


def stop_at_deadline(counts: list[int], blamed: list[int], tmp_path: Path) -> tuple[Watch, str]:
    """Two processes blocked for ever, watched with ``join_timeout=0.5`` while the shared
    arrays hold ``counts`` and ``blamed``: the watch and its report."""
    context = multiprocessing.get_context("spawn")
    arrays = [context.Array("q", values, lock=False) for values in (counts, blamed)]
    processes = [context.Process(target=helpers.block) for _ in range(2)]
    for process in processes:
        process.start()
    watch = Watch(processes, arrays[0], arrays[1], 0.5)
    watch.run()
    return watch, watch.report(tmp_path)


def test_ranks_stopped_at_join_timeout_are_not_reported_as_failed(tmp_path: Path) -> None:
    """Both ranks still running at the deadline, as far as each other: they are named as
    stopped at join_timeout, and no rank is said to have failed (spawn killed them)."""
    watch, report = stop_at_deadline([4, 4], [0, 0], tmp_path)
    assert report == "ranks [0, 1] were still running after join_timeout=0.5 s and were stopped"
    assert watch.failed == [] and watch.late == [0, 1]


def test_the_rank_behind_the_others_is_named_first(tmp_path: Path) -> None:
    """Rank 1 reached fewer watched collectives than rank 0: the report's first line says it
    stopped making progress."""
    _, report = stop_at_deadline([4, 3], [0, 0], tmp_path)
    assert report.splitlines() == [
        "rank 1 stopped making progress: the other ranks waited for it in a collective",
        "ranks [0, 1] were still running after join_timeout=0.5 s and were stopped",
    ]


def test_a_rank_another_found_hung_is_named_though_it_counted_as_far(tmp_path: Path) -> None:
    """Rank 0 blamed rank 1 (hung inside its step after arming the gradient all-reduce: the
    same count): rank 1 is named first."""
    _, report = stop_at_deadline([4, 4], [0, 1], tmp_path)
    assert report.startswith("rank 1 stopped making progress")
