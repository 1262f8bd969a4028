"""Checkpoint writes on a background thread, with errors that are never lost.

:func:`checkpoint_writer` is the run's ``checkpoint-writer``: a
:class:`~ember.train._background.BackgroundWorker` of capacity 1 (one write runs, at most one
waits, a third blocks: Burn's "only one checkpoint can be done in advance"), whose failed write is
re-raised once by the next checkpoint, ``flush`` or ``close``. :class:`AsyncCheckpointer` wraps
any :class:`Checkpointer` with one (Burn's ``AsyncCheckpointer``; deprecated in ``ember.train``
since 0.3.0: the run's checkpointer writes on this thread already). Records are snapshots already,
so the caller may change its weights as soon as ``save`` returns.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ember._errors import CheckpointError
from ember._rundir.atomic import CheckpointFile
from ember.train._background import BackgroundWorker, Job
from ember.train._checkpoint.file import Checkpointer
from ember.train._checkpoint.record import Record

__all__ = ["AsyncCheckpointer", "checkpoint_writer"]

THREAD_NAME = "checkpoint-writer"


def checkpoint_writer() -> BackgroundWorker:
    """The thread checkpoints are written on (see the module doc)."""
    return BackgroundWorker(THREAD_NAME, capacity=1, job="checkpoint write")


class AsyncCheckpointer:
    """A :class:`Checkpointer` whose ``save`` and ``delete`` run on a background thread.

    ``restore`` waits for the pending writes first. A failed write is re-raised (with a note
    naming the epoch) by the next ``save``, ``delete``, ``flush`` or ``close``.
    """

    def __init__(self, checkpointer: Checkpointer) -> None:
        self._checkpointer = checkpointer
        self._writer = checkpoint_writer()
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncCheckpointer({self._checkpointer!r})"

    def save(self, epoch: int, record: Record) -> CheckpointFile | None:
        """Queue the save of ``record`` as epoch ``epoch``; what was written is not known yet."""

        def job() -> None:
            with _noting(f"saving epoch {epoch} with {self._checkpointer!r}"):
                self._checkpointer.save(epoch, record)

        self._submit(job)
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

        self._submit(job)

    def _submit(self, job: Job) -> None:
        if self._closed:
            raise CheckpointError(f"{self!r} is closed")
        self._writer.raise_pending()
        self._writer.submit(job)

    def flush(self) -> None:
        """Wait for pending writes; raise a pending error."""
        self._writer.flush()

    def close(self) -> None:
        """Finish pending writes and stop the thread; raise a pending error once. Idempotent."""
        self._closed = True
        self._writer.close()


@contextmanager
def _noting(what: str) -> Iterator[None]:
    try:
        yield
    except BaseException as error:
        error.add_note(f"ember: checkpoint failed while {what}")
        raise
