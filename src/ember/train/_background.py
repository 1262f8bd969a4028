"""Work done on a thread of its own, in order, with errors that are never lost.

One class for every background thread that writes for a run: the checkpoint writes
(``checkpoint-writer``), and the metric files where no writer process can be started
(``metric-writer``, ``train/_logger/metric_writer.py``). :class:`BackgroundWorker` runs submitted
jobs in order on one daemon thread, started by the first job. With a ``capacity``, at most that many
jobs wait: one more ``submit`` blocks (Burn's "only one checkpoint can be done in advance");
without, the queue is unbounded and the submitter never waits for the disk.

A job's exception is kept and re-raised, the original object with its traceback, exactly once:
by the next :meth:`~BackgroundWorker.raise_pending` (which callers run before changing their own
state for a new job), :meth:`~BackgroundWorker.flush` or :meth:`~BackgroundWorker.close`,
whichever comes first. Later jobs still run (pending writes are made); should one fail too while
an error is pending, it is added to that error as a note. :meth:`~BackgroundWorker.close` stops
the thread; a later job starts a new one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

__all__ = ["BackgroundWorker", "Job"]

Job = Callable[[], None]


class BackgroundWorker:
    """Runs jobs in order on one thread named ``name``; see the module doc. ``job`` says what a
    job is in a note about a later failure (``"checkpoint write"``)."""

    def __init__(self, name: str, *, capacity: int = 0, job: str = "job") -> None:
        self.name, self.job = name, job
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._error: BaseException | None = None

    def submit(self, job: Job) -> None:
        """Queue ``job`` (blocks while ``capacity`` jobs already wait). A pending error is not
        raised here: callers call :meth:`raise_pending` first."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        self._queue.put(job)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every submitted job has finished (errors stay pending), or at most
        ``timeout`` seconds: whether they finished."""
        if self._thread is None:
            return True
        if timeout is None:
            self._queue.join()
            return True
        done = threading.Event()  # a job after the others: set when they are done
        try:
            self._queue.put(done.set, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def raise_pending(self) -> None:
        """Re-raise the error of a failed job, once."""
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def flush(self) -> None:
        """Wait for every submitted job, then raise a pending error."""
        self.wait()
        self.raise_pending()

    def close(self, timeout: float | None = None) -> bool:
        """Finish the submitted jobs, stop the thread, raise a pending error; idempotent. With
        a ``timeout``, wait at most that many seconds: False when the thread is still busy then
        (left behind, it stops after its jobs; a thread cannot be killed)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
            if thread.is_alive():
                return False
        self.raise_pending()
        return True

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except BaseException as error:  # kept for the submitting side, never swallowed
                self._keep(error)
            finally:
                self._queue.task_done()

    def _keep(self, error: BaseException) -> None:
        with self._lock:
            if self._error is None:
                self._error = error
            else:
                self._error.add_note(
                    f"a later {self.job} failed too: {type(error).__name__}: {error}"
                )
