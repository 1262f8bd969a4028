"""Processes for data-parallel training: ``spawn``, and the process group from the environment.

``torchrun`` is the launcher for real jobs (one node or many; see ``docs/strategies.md``).
:func:`spawn` is the quick local one, for scripts and tests: it starts ``world_size`` processes
with torchrun's environment, initialises the process group in each, calls ``fn(*args)`` and
watches them::

    parent                                        rank r = 0 .. world_size - 1
    rendezvous store on 127.0.0.1:<free port>     RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...
    (the port is held, never re-picked)           init_process_group(backend, timeout)
    wait for the processes                        fn(*args); destroy_process_group()
    first non-zero exit: stop the others          an exception: its traceback goes to the parent,
    raise DistributedError naming the rank(s)     exit code 1
    (the one that stopped progressing first)      counts its watched collectives (_progress.py)

Safety: the store and the gloo transport bind to the loopback interface; a rank that dies ends
the job at once (the others are terminated, then killed 5 s later) with an error naming it.

What ranks exchange, tensors only and never a pickle, is the strategies' own
(``ember/train/_strategy/collectives.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch.distributed.rendezvous import rendezvous

from ember._checks import check_positive_int
from ember._errors import DistributedError
from ember.distributed._attempt import attempt_store
from ember.distributed._progress import follow
from ember.distributed._watch import ERROR_FILE, Watch, stop

__all__ = ["DEFAULT_TIMEOUT", "DistributedError", "init_from_environment", "spawn"]

DEFAULT_TIMEOUT = timedelta(minutes=5)
_TORCH_DISTRIBUTED = os.path.dirname(dist.__file__) + os.sep


# --- the process group ---------------------------------------------------------------------


def init_from_environment(
    backend: str,
    timeout: timedelta,
    init_method: str | None = None,
    device: torch.device | None = None,
) -> None:
    """Initialise the default process group from torchrun's variables, unless one exists.

    ``init_method`` defaults to ``env://`` (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``); a missing variable raises DistributedError naming it.
    """
    if dist.is_initialized():
        return
    if init_method is None:
        missing = [
            name
            for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
            if not os.environ.get(name)
        ]
        if missing:
            raise DistributedError(
                f"no process group and no torchrun environment ({', '.join(missing)} unset): "
                "launch with `torchrun --nproc-per-node N script.py`, or with "
                "ember.distributed.spawn(fn, N)"
            )
    _bind_gloo_to_loopback(os.environ.get("MASTER_ADDR", ""))
    device_id = device if device is not None and device.type == "cuda" else None
    # torch's own rendezvous (env://, tcp://, file://), then this attempt's namespace of its
    # store: a store that outlives a restart (torchrun's) holds the dead attempt's keys
    store, rank, world = next(rendezvous(init_method or "env://", timeout=timeout))
    store.set_timeout(timeout)
    dist.init_process_group(
        backend,
        store=attempt_store(store, rank, world, timeout),
        rank=rank,
        world_size=world,
        timeout=timeout,
        device_id=device_id,
    )


def _bind_gloo_to_loopback(master_addr: str) -> None:
    """Keep gloo's sockets on the loopback interface when the rendezvous is local."""
    if master_addr not in ("127.0.0.1", "localhost", "::1") or "GLOO_SOCKET_IFNAME" in os.environ:
        return
    names = [name for _, name in socket.if_nameindex()]
    for name in ("lo", "lo0"):
        if name in names:
            os.environ["GLOO_SOCKET_IFNAME"] = name
            return


# --- spawn ---------------------------------------------------------------------------------


def spawn(
    fn: Callable[..., Any],
    world_size: int,
    *args: Any,
    backend: str = "gloo",
    timeout: timedelta = DEFAULT_TIMEOUT,
    join_timeout: float | None = None,
) -> None:
    """Run ``fn(*args)`` in ``world_size`` local processes, each a rank of one process group.

    Each process gets torchrun's variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
    ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, ``MASTER_PORT``) and an initialised
    process group (``backend``, collectives time out after ``timeout``), so
    ``DistributedDataParallel()`` in ``fn`` uses it. ``fn`` must be importable by the new
    processes (a module-level function; ``args`` are handed over by ``multiprocessing``, so
    they must be picklable); its return value is dropped (write results to files). A rank
    exits once ``fn`` has returned and the group is destroyed: its threads are waited for and
    its atexit handlers run, as at a normal exit; the interpreter's finalisation does not run
    (torch's gloo objects can abort a process there).

    Returns when every rank has exited 0. Raises :class:`DistributedError` naming the rank that
    failed first, its exit code and its traceback (then any others), once the others are
    stopped; or naming the ranks still running after ``join_timeout`` seconds (they are
    stopped too). A rank that stopped making progress while the others waited for it (behind
    them in the watched collectives of ember's strategies) is named first; a rank spawn
    stopped itself is never reported as failed.
    """
    world_size = check_positive_int("world_size", world_size)
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    qualname = getattr(fn, "__qualname__", "")
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise ValueError(
            f"fn must be importable by the new processes (a module-level function), got {qualname}"
        )
    if join_timeout is not None and join_timeout <= 0:
        raise ValueError(f"join_timeout must be > 0 seconds or None, got {join_timeout}")
    if backend == "nccl" and world_size > torch.cuda.device_count():
        raise ValueError(
            f"backend 'nccl' needs a CUDA device per rank: world_size {world_size}, "
            f"{torch.cuda.device_count()} devices"
        )
    context = multiprocessing.get_context("spawn")
    # how far each rank got, and which ranks the others found hung (_progress.py)
    counts = context.Array("q", world_size, lock=False)
    blamed = context.Array("q", world_size, lock=False)
    with (
        tempfile.TemporaryDirectory(prefix="ember-spawn-") as errors,
        _local_store(world_size, timeout) as port,
    ):
        processes = [
            context.Process(
                target=_run_rank,
                args=(fn, args, rank, world_size, port, backend, timeout, errors, (counts, blamed)),
                name=f"ember-rank-{rank}",
            )
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        watch = Watch(processes, counts, blamed, join_timeout)
        try:
            watch.run()
        except BaseException:
            stop(processes, kill_now=True)
            raise
        if watch.failed or watch.late:
            raise DistributedError(watch.report(Path(errors)), watch.codes)


@contextlib.contextmanager
def _local_store(world_size: int, timeout: timedelta) -> Iterator[int]:
    """A rendezvous store on 127.0.0.1 whose port is bound here and held until the job ends.

    Binding the socket ourselves (port 0) and handing it to the store leaves no window in
    which another process could take the port between picking and using it.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port: int = listener.getsockname()[1]
        store = dist.TCPStore(  # type: ignore[attr-defined]  # exported, but not in the stubs
            "127.0.0.1",
            port,
            world_size,
            is_master=True,
            timeout=timeout,
            wait_for_workers=False,
            master_listen_fd=listener.fileno(),
        )
    except BaseException:
        listener.close()
        raise
    listener.detach()  # the store owns the socket now, and closes it
    try:
        yield port
    finally:
        del store


def _run_rank(
    fn: Callable[..., Any],
    args: Sequence[Any],
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout: timedelta,
    errors: str,
    progress: tuple[Any, Any],
) -> None:
    """A spawned process: torchrun's environment, the process group, ``fn(*args)``."""
    follow(*progress, rank)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_USE_AGENT_STORE="True",  # the parent holds the store: every rank connects
    )
    try:
        device = None
        if backend == "nccl":
            torch.cuda.set_device(rank)
            device = torch.device("cuda", rank)
        init_from_environment(backend, timeout, device=device)
        try:
            fn(*args)
        except SystemExit as exiting:  # sys.exit(n) keeps its code (a preempted launch: 75)
            if exiting.code not in (None, 0):
                _fail(errors, rank, exiting.code if isinstance(exiting.code, int) else 1)
        if dist.is_initialized():  # fn may have torn it down (DDP does after an error)
            dist.destroy_process_group()
    except BaseException:
        _fail(errors, rank, 1)
    _exit_before_teardown()


def _fail(errors: str, rank: int, code: int) -> NoReturn:
    """End a rank whose ``fn`` failed with exit ``code``, its traceback left for the parent."""
    text = f"{time.time()!r}\n{traceback.format_exc()}"  # when: orders the failures
    with contextlib.suppress(OSError):
        Path(errors, ERROR_FILE.format(rank=rank)).write_text(text, encoding="utf-8")
    # skip interpreter teardown: a process group with a dead peer can abort or hang there
    os._exit(code)


def _exit_before_teardown() -> NoReturn:
    """End a rank whose ``fn`` returned: exit code 0, without the interpreter's finalisation.

    As at a normal exit, the threads ``fn`` left running (not daemons) are waited for, then the
    atexit handlers run and the standard streams are flushed, while the interpreter is whole;
    its finalisation is skipped because gloo objects of torch's that outlive the
    process group (worker threads, tensors they still hold) can abort the process there
    ("terminate called without an active exception", SIGABRT) after all the work is done:
    seen once in CI on a rank that had trained.
    """
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
