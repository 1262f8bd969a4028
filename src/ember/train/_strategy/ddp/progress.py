"""Finding a rank that stopped making progress, long before the collective timeout.

A rank that hangs in its step (a deadlocked data loader, a stuck device, a ``time.sleep`` in
user code) leaves the others blocked in the next collective until its timeout, five minutes by
default, and torch then blames the ranks that waited. So before the first collective that
follows user code in each unit of work (a training step's first gradient all-reduce, the
exchange after a validation batch), every rank writes a key ``{count}/{rank}`` to the job's
store and waits at most ``progress_timeout`` for the same key of every other rank::

    arrive(what):                               # the same sequence of calls on every rank
        count += 1
        store[f"{run}/{count}/{rank}"] = ""
        wait for f"{run}/{count}/{r}" of every rank r, at most progress_timeout
            timed out: DistributedError naming the ranks without a key (no collective started,
                       so the process group tears down at once)
        delete f"{run}/{count - 1}/{rank}"      # every rank passed it: nobody waits for it
    a rank that fails writes its next key, so the others go on to the collective and fail there
    at once (its process group is torn down); one that dies is named after progress_timeout

The store is the one the process group was made with (a TCP store: the waits are answered by
its server, not by polling). It costs three small store requests per unit of work (about
60 µs on an idle machine, a third of a gloo barrier; more when the store's host is busy).
``progress_timeout=None`` on the strategy means a fifth of its ``timeout``.
"""

from __future__ import annotations

import contextlib
import itertools
from datetime import timedelta
from typing import Any

import torch.distributed.distributed_c10d as c10d

from ember._errors import DistributedError
from ember.train._step import current_step
from ember.train._strategy.ddp.ranks import Ranks

__all__ = ["ProgressWatch"]

_RUNS = itertools.count(1)  # every rank makes its runs in the same order: the same numbers


class ProgressWatch:
    """One run's progress agreement through the job's store (see the module doc)."""

    def __init__(self, ranks: Ranks, timeout: timedelta) -> None:
        self._ranks = ranks
        self._timeout = timeout
        self._count = 0
        self._run = next(_RUNS)
        self._store: Any = None
        if ranks.world > 1:
            store = c10d._get_default_store()
            self._store = c10d.PrefixStore(f"ember/progress/{self._run}/", store)

    def arrive(self, what: str) -> None:
        """This rank reached ``what`` (a collective); return once every rank has, or raise
        :class:`DistributedError` naming the ranks that did not within the timeout."""
        store = self._store
        if store is None:
            return
        self._count += 1
        rank, count = self._ranks.rank, self._count
        keys = [f"{count}/{r}" for r in range(self._ranks.world)]
        try:
            store.set(keys[rank], "")
            store.wait(keys, self._timeout)
        except RuntimeError as error:  # a timeout, or the store is gone with its job
            raise self._stuck(keys, what, error) from error
        if count > 1:
            store.delete_key(f"{count - 1}/{rank}")

    def close(self, *, failed: bool = False) -> None:
        """Remove this rank's last key (the store outlives the run). After a failure here, the
        key of the next agreement is written instead: the others pass it at once and fail in
        the collective ("another rank has died"), not ``progress_timeout`` later blaming this
        rank."""
        store = self._store
        if store is None:
            return
        with contextlib.suppress(RuntimeError):  # the job is ending anyway
            if failed:
                store.set(f"{self._count + 1}/{self._ranks.rank}", "")
            elif self._count:
                store.delete_key(f"{self._count}/{self._ranks.rank}")

    def _stuck(self, keys: list[str], what: str, error: RuntimeError) -> DistributedError:
        try:
            late = [r for r, key in enumerate(keys) if not self._store.check([key])]
        except RuntimeError:
            late = []
        step = current_step()
        where = "" if step is None else f" of epoch {step.epoch}"
        if step is not None and self._ranks.is_main:  # only rank 0 counts the iterations
            where += f", iteration {step.iteration}"
        seconds = self._timeout.total_seconds()
        if not late:
            return DistributedError(
                f"rank {self._ranks.rank}: the progress agreement before {what}{where} failed: "
                f"{error}"
            )
        names = ", ".join(str(r) for r in late)
        return DistributedError(
            f"rank{'s' if len(late) > 1 else ''} {names} made no progress for {seconds:g} s: "
            f"rank {self._ranks.rank} reached {what}{where} and "
            f"rank{'s' if len(late) > 1 else ''} {names} did not (hung in a step or a data "
            "loader, or far slower than the others; if its steps legitimately take that long, "
            "raise DistributedDataParallel(progress_timeout=...))"
        )
