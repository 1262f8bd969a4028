"""Watching the ranks of :func:`~ember.distributed.spawn` and saying how the job ended.

The parent waits for its ranks; on the first failure, or when ``join_timeout`` runs out, it
stops the others (terminated, then killed :data:`KILL_AFTER_S` later) and raises a
:class:`~ember.DistributedError` whose first line names the rank to look at:

- a rank that stopped making progress, the others waiting for it (``_progress.py``): one that
  another rank found hung through the job's store, else one still running that had reached
  fewer watched collectives than the farthest one when the job stopped;
- else the rank that failed first: a rank that died without reporting an error (killed,
  ``os._exit``) before the ranks that raised, which are ordered by when they raised (the
  others' errors are usually its consequence);
- else the ranks still running at ``join_timeout``.

A rank the parent stopped itself is never reported as failed ("killed by SIGTERM"), and the
tracebacks of the failed ranks follow, read from the error files they left (:data:`ERROR_FILE`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import signal
import time
from collections.abc import Sequence
from pathlib import Path

from ember._errors import REQUEUE_EXIT_CODE
from ember.distributed._progress import stopped_progressing

__all__ = ["ERROR_FILE", "KILL_AFTER_S", "Watch", "stop"]

KILL_AFTER_S = 5.0  # a terminated rank still running this long after SIGTERM is killed
ERROR_FILE = "rank-{rank}.error"  # where a failed rank leaves when it failed and its traceback


class Watch:
    """The ranks of one :func:`spawn`, waited for until they have all exited.

    On the first failure (or at ``join_timeout``) the others are stopped: terminated, then
    killed :data:`KILL_AFTER_S` later. What spawn stopped itself is never reported as a
    failure; the ranks the others waited for (``_progress.py``) are named as the ones that
    stopped making progress.
    """

    def __init__(
        self,
        processes: Sequence[multiprocessing.process.BaseProcess],
        counts: Sequence[int],
        blamed: Sequence[int],
        join_timeout: float | None,
    ) -> None:
        self._processes = processes
        self._counts = counts
        self._blamed = blamed
        self._join_timeout = join_timeout
        self._deadline = None if join_timeout is None else time.monotonic() + join_timeout
        self._kill_at: float | None = None
        self.failed: list[dict[int, int]] = []
        """The ranks that failed with their exit codes, one dict per wake-up that saw some."""
        self.stopped: list[int] = []  # the ranks stopped because of a failure
        self.late: list[int] = []  # the ranks stopped at the deadline
        self.behind: list[int] = []  # the ranks that had stopped making progress by then

    @property
    def codes(self) -> dict[int, int]:
        """The exit code of every rank that failed."""
        return {rank: code for wake in self.failed for rank, code in wake.items()}

    def run(self) -> None:
        """Wait until every rank has exited, stopping them as the class doc says."""
        while True:
            self._collect()
            running = [rank for rank, p in enumerate(self._processes) if p.exitcode is None]
            if not running:
                return
            self._stop_when_due(running)
            sentinels = [self._processes[rank].sentinel for rank in running]
            multiprocessing.connection.wait(sentinels, timeout=self._until_due())

    def _until_due(self) -> float:
        """How long to wait for an exit before the next thing due: the kill, the deadline, or
        half a second (the processes' exits wake the wait up before)."""
        due = self._kill_at if self._kill_at is not None else self._deadline
        return 0.5 if due is None else max(0.0, min(0.5, due - time.monotonic()))

    def _collect(self) -> None:
        """Note the ranks that failed since the last wake-up (not those spawn stopped)."""
        known = {*self.codes, *self.stopped, *self.late}
        ended = {
            rank: process.exitcode
            for rank, process in enumerate(self._processes)
            if process.exitcode not in (None, 0) and rank not in known
        }
        if ended:
            self.failed.append(ended)

    def _stop_when_due(self, running: list[int]) -> None:
        now = time.monotonic()
        if self._kill_at is not None:
            if now >= self._kill_at:
                stop([self._processes[rank] for rank in running], kill_now=True)
            return
        if self.failed or (self._deadline is not None and now >= self._deadline):
            self.behind = stopped_progressing(list(self._counts), list(self._blamed), running)
            (self.stopped if self.failed else self.late).extend(running)
            stop([self._processes[rank] for rank in running], kill_now=False)
            self._kill_at = now + KILL_AFTER_S

    def report(self, errors: Path) -> str:
        """The error of a job that did not end well: the rank that stopped progressing or
        failed first in its first line, then the others, then the tracebacks."""
        lines = []
        if self.behind:
            lines.append(self._stalled())
        if self.failed:
            lines += _failures(self.failed, self.stopped, errors)
        else:
            lines.append(
                f"ranks {self.late} were still running after join_timeout="
                f"{self._join_timeout} s and were stopped"
            )
        return "\n".join(lines)

    def _stalled(self) -> str:
        names = ", ".join(str(rank) for rank in self.behind)
        plural = len(self.behind) > 1
        return (
            f"rank{'s' if plural else ''} {names} stopped making progress: the other ranks "
            f"waited for {'them' if plural else 'it'} in a collective"
        )


def stop(processes: Sequence[multiprocessing.process.BaseProcess], *, kill_now: bool) -> None:
    for process in processes:
        if process.exitcode is None:
            if kill_now:
                process.kill()
            else:
                process.terminate()
    if kill_now:
        for process in processes:
            process.join(KILL_AFTER_S)


def _failures(failed: list[dict[int, int]], stopped: list[int], errors: Path) -> list[str]:
    """Name the rank that failed first, then the others, with their tracebacks.

    Failures seen at the same wake-up are ordered by when they happened: a rank that died
    without reporting an error (killed, ``os._exit``) is taken to be first, since the others'
    errors are usually its consequence; ranks that raised are ordered by when they raised.
    """
    reports = {rank: _read_report(errors, rank) for wake in failed for rank in wake}

    def when(rank: int) -> float:
        report = reports[rank]
        return -1.0 if report is None else report[0]

    order = [rank for wake in failed for rank in sorted(wake, key=lambda r: (when(r), r))]
    codes = {rank: code for wake in failed for rank, code in wake.items()}
    first, *others = order
    lines = [f"rank {first} failed first ({_describe_exit(codes[first])})"]
    lines += [f"rank {rank} failed too ({_describe_exit(codes[rank])})" for rank in others]
    if stopped:
        lines.append(f"ranks {stopped} were stopped")
    for rank in order:
        report = reports[rank]
        if report is not None:
            lines.append(f"--- rank {rank} ---\n{report[1].rstrip()}")
    return lines


def _read_report(errors: Path, rank: int) -> tuple[float, str] | None:
    path = errors / ERROR_FILE.format(rank=rank)
    try:
        stamp, _, text = path.read_text(encoding="utf-8").partition("\n")
        return float(stamp), text
    except (OSError, ValueError):
        return None


def _describe_exit(code: int) -> str:
    if code == REQUEUE_EXIT_CODE:
        return f"exit code {code}: stopped by a preemption signal, to requeue"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
        return f"killed by signal {-code}"
    return f"exit code {code}"
