"""The one background worker (checkpoint writes, metric files): jobs in order on a named thread,
a failure raised once with later ones noted on it, a thread that stops at close and starts
again with the next job."""

from __future__ import annotations

import functools
import threading

import pytest

from ember.train._background import BackgroundWorker


def test_jobs_run_in_order_on_the_named_thread() -> None:
    worker = BackgroundWorker("test-writer")
    seen: list[tuple[int, str]] = []

    def job(index: int) -> None:
        seen.append((index, threading.current_thread().name))

    for index in range(5):
        worker.submit(functools.partial(job, index))
    worker.flush()
    assert seen == [(i, "test-writer") for i in range(5)]
    worker.close()
    assert not any(t.name == "test-writer" for t in threading.enumerate())


def test_a_failure_is_raised_once_and_later_ones_are_noted_on_it() -> None:
    worker = BackgroundWorker("test-writer", job="test write")
    ran: list[int] = []

    def fail(message: str) -> None:
        raise OSError(message)

    worker.submit(lambda: fail("first"))
    worker.submit(lambda: ran.append(1))  # later jobs still run
    worker.submit(lambda: fail("second"))
    with pytest.raises(OSError, match="first") as raised:
        worker.flush()
    assert ran == [1]
    assert "a later test write failed too: OSError: second" in raised.value.__notes__
    worker.raise_pending()  # raised once: nothing is left
    worker.close()


def test_a_closed_worker_starts_again_with_the_next_job() -> None:
    worker = BackgroundWorker("test-writer")
    seen: list[int] = []
    worker.submit(lambda: seen.append(1))
    worker.close()
    worker.submit(lambda: seen.append(2))
    worker.close()
    assert seen == [1, 2]
    assert not any(t.name == "test-writer" for t in threading.enumerate())
