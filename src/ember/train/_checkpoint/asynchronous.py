"""Checkpoint writes on a background thread, with errors that are never lost.

:class:`BackgroundWriter` runs jobs on one daemon thread named ``checkpoint-writer`` (started on
the first job) through a queue of capacity 1: one job runs, at most one waits, and a third
``submit`` blocks — Burn's "only one checkpoint can be done in advance". A job's exception is kept
and re-raised, the original object with its traceback, exactly once: by the next
``raise_pending`` (which callers run before each new job), ``flush`` or ``close``, whichever
comes first. Later jobs still run (pending checkpoints are
written); should one fail too while an error is pending, it is added to that error as a note.

:class:`AsyncCheckpointer` wraps any :class:`Checkpointer` with one (Burn's ``AsyncCheckpointer``).
Records are snapshots already, so the caller may change its weights as soon as ``save`` returns.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ember._errors import CheckpointError
from ember.train._checkpoint.file import Checkpointer, CheckpointFile
from ember.train._checkpoint.record import Record

__all__ = ["AsyncCheckpointer", "BackgroundWriter"]

THREAD_NAME = "checkpoint-writer"

Job = Callable[[], None]


class BackgroundWriter:
    """Runs jobs in order on one ``checkpoint-writer`` thread; see the module doc."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=1)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False

    def submit(self, job: Job) -> None:
        """Queue ``job`` (blocks while another job already waits).

        It does not raise a pending error: callers call :meth:`raise_pending` first, before they
        change any state of their own for the job.
        """
        if self._closed:
            raise CheckpointError("the checkpoint writer is closed")
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread.start()
        self._queue.put(job)

    def wait(self) -> None:
        """Block until every submitted job has finished (errors stay pending)."""
        if self._thread is not None:
            self._queue.join()

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

    def close(self) -> None:
        """Finish the submitted jobs, stop the thread, raise a pending error; idempotent."""
        if not self._closed:
            self._closed = True
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
        self.raise_pending()

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                job()
            except BaseException as error:  # kept for the training thread, never swallowed
                with self._lock:
                    if self._error is None:
                        self._error = error
                    else:
                        self._error.add_note(
                            f"a later checkpoint write failed too: {type(error).__name__}: {error}"
                        )
            finally:
                self._queue.task_done()


class AsyncCheckpointer:
    """A :class:`Checkpointer` whose ``save`` and ``delete`` run on a :class:`BackgroundWriter`.

    ``restore`` waits for the pending writes first. A failed write is re-raised (with a note
    naming the epoch) by the next ``save``, ``delete``, ``flush`` or ``close``.
    """

    def __init__(self, checkpointer: Checkpointer) -> None:
        self._checkpointer = checkpointer
        self._writer = BackgroundWriter()

    def __repr__(self) -> str:
        return f"AsyncCheckpointer({self._checkpointer!r})"

    def save(self, epoch: int, record: Record) -> CheckpointFile | None:
        """Queue the save of ``record`` as epoch ``epoch``; what was written is not known yet."""

        def job() -> None:
            with _noting(f"saving epoch {epoch} with {self._checkpointer!r}"):
                self._checkpointer.save(epoch, record)

        self._writer.raise_pending()
        self._writer.submit(job)
        return None

    def restore(self, epoch: int) -> Record:
        """Wait for pending writes, then restore epoch ``epoch``."""
        self._writer.wait()
        return self._checkpointer.restore(epoch)

    def delete(self, epoch: int) -> None:
        """Queue the deletion of epoch ``epoch``."""

        def job() -> None:
            with _noting(f"deleting epoch {epoch} with {self._checkpointer!r}"):
                self._checkpointer.delete(epoch)

        self._writer.raise_pending()
        self._writer.submit(job)

    def flush(self) -> None:
        """Wait for pending writes; raise a pending error."""
        self._writer.flush()

    def close(self) -> None:
        """Finish pending writes and stop the thread; raise a pending error once. Idempotent."""
        self._writer.close()


@contextmanager
def _noting(what: str) -> Iterator[None]:
    try:
        yield
    except BaseException as error:
        error.add_note(f"ember: checkpoint failed while {what}")
        raise
