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


def test_a_bounded_wait_and_close_give_up_on_a_blocked_job_and_the_thread_ends_after_it() -> None:
    """A job blocked (as a write on a hung mount) is waited for at most the timeout: wait and
    close say False, and the thread left behind ends once the job is let go."""
    worker = BackgroundWorker("test-writer")
    release = threading.Event()

    def blocked() -> None:
        release.wait()

    worker.submit(blocked)
    assert worker.wait(timeout=0.05) is False
    assert worker.close(timeout=0.05) is False
    (thread,) = [t for t in threading.enumerate() if t.name == "test-writer"]
    release.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert worker.wait(timeout=0.05) is True  # closed: nothing to wait for


def test_a_bounded_wait_returns_once_the_jobs_are_done() -> None:
    worker = BackgroundWorker("test-writer")
    done: list[int] = []
    worker.submit(lambda: done.append(1))
    assert worker.wait(timeout=30) is True
    assert done == [1]
    assert worker.close(timeout=30) is True
