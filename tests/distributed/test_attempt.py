"""An attempt's namespace of the job's store: fresh for every attempt, stale keys never read."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import torch.distributed as dist

from ember.distributed import DistributedError
from ember.distributed._attempt import attempt_store

TIMEOUT = timedelta(seconds=30)


def server() -> Any:
    """A TCP store on a free port of 127.0.0.1, as torchrun's agent hosts one."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)  # type: ignore[attr-defined]


def client(store: Any) -> Any:
    return dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=TIMEOUT)  # type: ignore[attr-defined]


def prefix_of(namespace: Any, store: Any) -> str:
    """The prefix ``namespace`` puts before its keys, read back from the server's keys."""
    probe = f"probe-{uuid.uuid4().hex}"
    namespace.set(probe, "1")
    namespace.get(probe)  # a store's set is not answered: a get on its connection follows it
    (key,) = [key for key in store.list_keys() if key.endswith(probe)]
    prefix: str = key.removesuffix(f"/{probe}")
    return prefix


def in_threads(*calls: Callable[[], Any]) -> list[Any]:
    """Run the ``calls`` in threads, each on its own, and return what each returned."""
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as error:  # re-raised in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def test_every_rank_gets_the_same_fresh_namespace_on_a_store_with_a_dead_attempt_s_keys() -> None:
    """A store holding an earlier attempt's announcement and answer (rank 1's old nonce and
    the old token): three ranks still agree on one new namespace, not the old one, and two
    attempts never share one."""
    store = server()
    store.set("ember/attempt/rank-1", "old-nonce")
    store.set("ember/attempt/old-nonce", "old-token")
    store.set("ember/attempt/rank-2", "older-nonce")
    stores = [client(store) for _ in range(3)]
    first = in_threads(*(lambda r=r: attempt_store(stores[r], r, 3, TIMEOUT) for r in range(3)))
    prefixes = {prefix_of(namespace, store) for namespace in first}
    assert len(prefixes) == 1 and "old-token" not in prefixes.pop()
    second = in_threads(*(lambda r=r: attempt_store(stores[r], r, 3, TIMEOUT) for r in range(3)))
    assert prefix_of(second[0], store) != prefix_of(first[0], store)
    assert prefix_of(second[2], store) == prefix_of(second[0], store)


def test_a_rank_that_announced_before_rank_0_cleared_the_store_announces_again() -> None:
    """Rank 1 announces itself first; rank 0 then removes the announcements of earlier
    attempts, rank 1's among them: rank 1 announces again and both agree."""
    store = server()
    rank1 = client(store)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(attempt_store(rank1, 1, 2, TIMEOUT)))
    thread.start()
    store.wait(["ember/attempt/rank-1"])  # rank 1 has announced itself
    zero = attempt_store(client(store), 0, 2, TIMEOUT)
    thread.join()
    assert prefix_of(result[0], store) == prefix_of(zero, store)


def test_a_rank_0_that_never_comes_fails_the_others_naming_it() -> None:
    """Rank 1 alone: once the timeout has run out it raises a DistributedError naming rank 0."""
    store = server()
    with pytest.raises(DistributedError, match=r"rank 1: rank 0 did not answer within 0\.3 s"):
        attempt_store(client(store), 1, 2, timedelta(seconds=0.3))


def test_rank_0_names_the_ranks_that_never_came() -> None:
    """Rank 0 of three, alone: the error names ranks 1 and 2."""
    store = server()
    with pytest.raises(DistributedError, match="rank 0: ranks 1, 2 did not join"):
        attempt_store(client(store), 0, 3, timedelta(seconds=0.3))
