"""How far each rank of :func:`~ember.distributed.spawn` got: memory its parent can read.

When a job stops (a rank failed, or ``join_timeout`` ran out), ``spawn`` names the rank that
stopped making progress, not one it stopped itself or one that failed waiting for it. Two
shared-memory arrays that ``spawn`` made, one int64 per rank, say so (a store to memory per
watched collective, nothing sent):

- ``counts[r]``: the watched collectives rank ``r`` reached (the same sequence on every rank:
  the gradient all-reduces, the exchanges after a chunk, FSDP's agreements;
  ``train/_strategy/ddp/progress.py``). A rank still running whose count is below the highest
  is one the others waited for.
- ``blamed[r]``: 1 once another rank found, through the job's store, that rank ``r`` made no
  progress for ``progress_timeout`` (the ranks' own verdict, which counts cannot give when the
  hung rank stopped inside its step after arming the collective).

Outside ``spawn`` (torchrun) :func:`passed` and :func:`blame` do nothing: torchrun's agent
reports the rank that exited first, and ember's error names a hung rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["blame", "follow", "passed", "stopped_progressing"]

_SHARED: list[Any] = []  # (counts, blamed, rank) once spawn made this process a rank


def follow(counts: Any, blamed: Any, rank: int) -> None:
    """In a spawned rank: count into ``counts[rank]``, blame into ``blamed`` (shared arrays)."""
    _SHARED[:] = [counts, blamed, rank]


def passed() -> None:
    """This rank reached the next watched collective (counted when ``spawn`` follows it)."""
    if _SHARED:
        counts, _, rank = _SHARED
        counts[rank] += 1


def blame(ranks: Iterable[int]) -> None:
    """This rank found that ``ranks`` made no progress (noted when ``spawn`` follows it)."""
    if _SHARED:
        blamed = _SHARED[1]
        for rank in ranks:
            blamed[rank] = 1


def stopped_progressing(
    counts: Sequence[int], blamed: Sequence[int], running: Iterable[int]
) -> list[int]:
    """The ranks the others waited for: those a rank blamed, else the ``running`` ranks that
    reached fewer watched collectives than the farthest rank (none when nobody counted)."""
    named = [rank for rank, flag in enumerate(blamed) if flag]
    if named:
        return named
    highest = max(counts, default=0)
    return sorted(rank for rank in running if counts[rank] < highest)
