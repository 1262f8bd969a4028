"""Finding a rank that stopped making progress, long before the collective timeout.

A rank that hangs in its step (a deadlocked data loader, a stuck device, a ``time.sleep`` in
user code) leaves the others blocked in the next collective until its timeout, five minutes by
default, and torch then blames the ranks that waited. ``progress_timeout`` bounds that wait for
the collectives that follow user code inside a pass, and when one fails the ranks find out
through the job's store which of them never got there.

**Watched collectives**: torch's gradient reducer, the buffers' broadcast, the by-hand
all-reduce and the exchange after a chunk of units (``DistributedDataParallel``), and before
each step's forward an all-reduce of one number (``FullyShardedDataParallel``, whose own
collectives run inside torch's FSDP with the job's timeout) run on process groups whose timeout
is ``progress_timeout`` (``ranks.py``). Nothing is paid per step beyond that: every rank counts
the watched collectives it starts, locally, and the store is only written when one fails::

    watching(what):                              # the same sequence on every rank
        count += 1, and the time it started
        run the collective: it fails after progress_timeout when a rank never joins it, at once
            when a peer closed its connection (it died, or failed and tore its group down)
        failed before progress_timeout could run out: a peer died or failed, DistributedError
            at once ("another rank has probably died or failed"), nobody waited for
        failed later: store[f"{run}/{count}/{rank}"] = ""
                wait for f"{run}/{count}/{r}" of every rank r, at most progress_timeout
                    timed out: DistributedError naming the ranks without a key ("made no
                               progress"), not this one
                    all there: every rank got there; the collective failed for another reason
                               (a rank failed or died in it): DistributedError saying so
    a rank that fails elsewhere writes the keys of its count and the next one, so the others
    learn at once that it did not hang (its process group is torn down: they fail at once too)

A dead peer thus fails the survivors within the time its transport takes to see the closed
connection (gloo: at once), never after ``progress_timeout``: under torchrun a restart costs
seconds, and rank 0 has the time to finish its run directory before the agent stops it.

The store is the one the process group was made with (a TCP store: the waits are answered by
its server, not by polling). ``progress_timeout=None`` on the strategy means a fifth of its
``timeout``.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from ember._errors import DistributedError
from ember.distributed._progress import blame, passed
from ember.train._step import current_step
from ember.train._strategy.collectives import collective_error
from ember.train._strategy.ddp.ranks import Ranks

__all__ = ["ProgressWatch"]

_RUNS = itertools.count(1)  # every rank makes its runs in the same order: the same numbers


class ProgressWatch:
    """One run's watch over its ranks' progress through the job's store (see the module doc)."""

    def __init__(self, ranks: Ranks, timeout: timedelta) -> None:
        self._ranks = ranks
        self._timeout = timeout
        self._count = 0
        self._what = ""
        self._key: str | None = None  # the key this rank left in the store, if any
        self._since = 0.0  # when this rank reached the watched collective (time.monotonic)
        self._flag = torch.zeros(1, dtype=torch.int32)  # what arrive() all-reduces
        self._run = next(_RUNS)
        self._store: Any = None
        if ranks.world > 1:
            store = c10d._get_default_store()
            self._store = c10d.PrefixStore(f"ember/progress/{self._run}/", store)

    @contextlib.contextmanager
    def watching(self, what: str) -> Iterator[None]:
        """Run a watched collective (``what``): a RuntimeError in it becomes the
        :class:`DistributedError` of :meth:`explain`."""
        self.reached(what)
        try:
            yield
        except RuntimeError as error:  # torch's DistBackendError is one
            raise self.explain(error) from error

    def reached(self, what: str) -> None:
        """This rank starts the next watched collective, ``what`` (no request: counted here)."""
        self._count += 1
        self._what = what
        self._since = time.monotonic()
        passed()  # spawn reads how far each rank got, to name one that stopped

    def explain(self, error: BaseException) -> DistributedError:
        """The error of the watched collective just :meth:`reached`, which failed with
        ``error``: the ranks that never got there, named, or the collective's own failure."""
        store = self._store
        if store is None or self._failed_early():
            return collective_error(self._what, error)
        keys = self._keys(self._count)
        try:
            self._leave(keys[self._ranks.rank])
            store.wait(keys, self._timeout)
        except RuntimeError as waited:  # a timeout, or the store is gone with its job
            return self._stuck(keys, waited)
        return collective_error(self._what, error)

    def _failed_early(self) -> bool:
        """Whether the collective failed before its timeout could run out: then no rank hung
        in it, a peer closed its connection (it died, or failed and tore its group down), and
        nobody is waited for."""
        return time.monotonic() - self._since < self._timeout.total_seconds()

    def arrive(self, what: str) -> None:
        """This rank reached ``what`` (a collective); return once every rank has, or raise
        :class:`DistributedError` naming the ranks that did not within the timeout (or at
        once, when a peer died or failed): one all-reduce of a number on the watched group."""
        if self._store is None:
            self.reached(what)
            return
        with self.watching(what):
            dist.all_reduce(self._flag, group=self._ranks.watched_cpu)

    def close(self, *, failed: bool = False) -> None:
        """Remove this rank's last key (the store outlives the run). After a failure here, the
        keys of this rank's count and the next one are written instead: the others, in that
        collective or the next, pass at once and fail in it ("another rank has died or
        failed"), not ``progress_timeout`` later blaming this rank."""
        store = self._store
        if store is None:
            return
        with contextlib.suppress(RuntimeError):  # the job is ending anyway
            if failed:
                rank = self._ranks.rank
                store.set(self._keys(self._count)[rank], "")
                store.set(self._keys(self._count + 1)[rank], "")
            elif self._key is not None:
                store.delete_key(self._key)

    def _keys(self, count: int) -> list[str]:
        return [f"{count}/{rank}" for rank in range(self._ranks.world)]

    def _leave(self, key: str) -> None:
        self._store.set(key, "")
        self._key = key

    def _stuck(self, keys: list[str], error: RuntimeError) -> DistributedError:
        try:
            late = [r for r, key in enumerate(keys) if not self._store.check([key])]
        except RuntimeError:
            late = []
        step = current_step()
        where = "" if step is None else f" of epoch {step.epoch}"
        if step is not None and self._ranks.is_main:  # only rank 0 counts the iterations
            where += f", iteration {step.iteration}"
        seconds = self._timeout.total_seconds()
        rank, what = self._ranks.rank, self._what
        if not late:
            return DistributedError(
                f"rank {rank}: the progress agreement before {what}{where} failed: {error}"
            )
        blame(late)  # for spawn's report
        names = ", ".join(str(r) for r in late)
        plural = "s" if len(late) > 1 else ""
        return DistributedError(
            f"rank{plural} {names} made no progress for {seconds:g} s: rank {rank} reached "
            f"{what}{where} and rank{plural} {names} did not (hung in a step or a data loader, "
            "or far slower than the others; if its steps legitimately take that long, raise "
            "DistributedDataParallel(progress_timeout=...))"
        )
