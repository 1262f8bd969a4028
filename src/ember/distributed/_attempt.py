"""One attempt's namespace in the job's store, so that a restarted job forms its groups afresh.

torchrun's elastic agent hosts the store its workers meet in (``TORCHELASTIC_USE_AGENT_STORE``)
and keeps it, on the same port, across the restarts of ``--max-restarts``: with the static
rendezvous the agent's ``TCPStore`` object is reused, with the c10d rendezvous its shared store
server. The keys a process group writes there are named by the group alone (gloo's addresses
under ``default_pg/0//cpu//0/<rank>``, NCCL's unique id, the keys of every ``new_group``), so
the ranks of a restarted attempt find the keys of the attempt that died: a rank that reads a
peer's address before the restarted peer has written its own connects to a port nobody listens
on any more (``Gloo connectFullMesh failed ... Connection refused``; NCCL waits on a stale id).
Whether it does depends on which process of the new attempt starts first: the restart failed
3 times in 4.

The restart count (``TORCHELASTIC_RESTART_COUNT``) cannot name the attempt: with the c10d
rendezvous an agent whose own workers did not fail restarts them without counting a restart,
so nodes disagree. So the ranks agree on a fresh random token, through keys that no earlier
attempt can have written, and every group of the attempt lives under ``ember/<token>/``::

    rank r > 0                                   rank 0
    n = a fresh random nonce                     remove every "ember/attempt/rank-<r>"
    repeat:                                      (from now on they are this attempt's: the
        set "ember/attempt/rank-<r>" = n          agent stopped every worker of the previous
        "ember/attempt/<n>" there? done           one before starting this one)
        (else pause, at most 0.1 s: rank 0        wait for every "ember/attempt/rank-<r>"
         may have removed n with the stale keys)  t = a fresh random token
    the token = get "ember/attempt/<n>"          set "ember/attempt/<n_r>" = t for every r

A key named by a fresh nonce cannot be stale, and rank 0 reads the nonces only after removing
the old ones. The agreement costs a few store requests per rank at start-up.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import torch.distributed.distributed_c10d as c10d

from ember._errors import DistributedError

__all__ = ["attempt_store"]

_PREFIX = "ember/attempt"
_FIRST_PAUSE_S = 0.005  # a rank's first pause before it asks again; doubled, up to the next
_LONGEST_PAUSE_S = 0.1


def attempt_store(store: Any, rank: int, world: int, timeout: timedelta) -> Any:
    """A ``PrefixStore`` over ``store`` that is this attempt's alone (see the module doc); every
    rank of the ``world`` calls it once, before making its process group."""
    if rank == 0:
        token = _choose_token(store, world, timeout)
    else:
        token = _receive_token(store, rank, timeout)
    return c10d.PrefixStore(f"ember/{token}", store)


def _choose_token(store: Any, world: int, timeout: timedelta) -> str:
    """Rank 0: clear the announcements of earlier attempts, read this attempt's, answer each."""
    keys = [f"{_PREFIX}/rank-{rank}" for rank in range(1, world)]
    for key in keys:
        store.delete_key(key)
    token = uuid.uuid4().hex
    if not keys:
        return token
    try:
        store.wait(keys, timeout)
    except RuntimeError as error:
        missing = [key.rsplit("-", 1)[1] for key in keys if not store.check([key])]
        plural = "s" if len(missing) > 1 else ""
        raise DistributedError(
            f"rank 0: rank{plural} {', '.join(missing)} did not join this attempt's process "
            f"group within {timeout.total_seconds():g} s (the timeout): {error}"
        ) from error
    for key in keys:
        nonce = store.get(key).decode("ascii")
        store.set(f"{_PREFIX}/{nonce}", token)
    return token


def _receive_token(store: Any, rank: int, timeout: timedelta) -> str:
    """Rank ``rank`` > 0: announce a fresh nonce until rank 0 answers it with the token.

    Polled (``check`` is answered at once), not waited for with a timeout: a store wait that
    times out makes torch print a warning, and the announcement must be made again when rank 0
    removes it with the stale ones.
    """
    nonce = uuid.uuid4().hex
    answer = f"{_PREFIX}/{nonce}"
    deadline = time.monotonic() + timeout.total_seconds()
    pause = _FIRST_PAUSE_S
    while True:
        store.set(f"{_PREFIX}/rank-{rank}", nonce)
        if store.check([answer]):
            return str(store.get(answer).decode("ascii"))
        if time.monotonic() >= deadline:
            raise DistributedError(
                f"rank {rank}: rank 0 did not answer within {timeout.total_seconds():g} s "
                "(the timeout) when this attempt's process group was formed"
            )
        time.sleep(pause)
        pause = min(2 * pause, _LONGEST_PAUSE_S)
