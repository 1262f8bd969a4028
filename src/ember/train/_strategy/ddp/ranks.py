"""A rank's place in a ``DistributedDataParallel`` job, shared by the strategy's modules.

:class:`Ranks` is what every distributed piece of a fit needs to know about this process: its
rank, the world size, its device, and the process groups its collectives go through:

- ``cpu``: small CPU messages (decisions, RNG states, the checks before training) whatever the
  backend of the gradients, with the job's collective ``timeout``: a rank may legitimately wait
  long there (rank 0 flushing its logs or writing a checkpoint while the others wait);
- ``watched_cpu``: a gloo group whose timeout is the strategy's ``progress_timeout``, for the
  small CPU messages that follow user code inside a pass (the exchange of stop wishes and output
  shapes): a rank that does not arrive within it has stopped making progress;
- ``watched``: the device tensors that follow user code inside a pass (torch's gradient
  reducer, buffers, the outputs sent to rank 0). With gloo it is ``watched_cpu``: its
  collectives block the host, so their timeout is what finds a hung rank. With NCCL it is the
  default group: NCCL's collectives do not block the host, which goes on to the next exchange
  on ``watched_cpu`` and finds a hung rank there.

``None`` stands for the default group. The gloo groups are made once per default group and
timeout (:func:`gloo_group`) and shared by every run in it: their threads and sockets live as
long as the default group's, instead of piling up with every ``launch``. The cache lets go of
them when the process exits (``atexit``), while the interpreter is whole: a gloo group freed
during the interpreter's finalisation can abort a process that has done all its work
("terminate called without an active exception"), which torchrun takes for a failed rank.
"""

from __future__ import annotations

import atexit
import dataclasses
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["Ranks", "gloo_group"]

_GLOO_GROUPS: dict[timedelta, Any] = {}
_GROUPS_OF: list[Any] = [None]  # the default group the groups above belong to


@dataclasses.dataclass(frozen=True, slots=True)
class Ranks:
    """This process's place in the job and its process groups (see the module doc)."""

    rank: int
    world: int
    device: torch.device
    cpu: Any  # a ProcessGroup, or None for the default group
    watched_cpu: Any
    watched: Any

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def gloo_group(timeout: timedelta) -> Any:
    """A gloo group of every rank whose collectives time out after ``timeout``, made the first
    time a run of this default group asks for it (a collective call: every rank runs the same
    runs, so every rank makes it at the same point) and reused by the runs after it."""
    world = dist.group.WORLD
    if _GROUPS_OF[0] is not world:  # a new default group: the old groups went with the old one
        _GLOO_GROUPS.clear()
        _GROUPS_OF[0] = world
        atexit.unregister(_forget)  # once, however many default groups the process makes
        atexit.register(_forget)
    group = _GLOO_GROUPS.get(timeout)
    if group is None:
        group = _GLOO_GROUPS[timeout] = dist.new_group(backend="gloo", timeout=timeout)
    return group


def _forget() -> None:
    """Let go of the cached groups (at exit: see the module doc)."""
    _GLOO_GROUPS.clear()
    _GROUPS_OF[0] = None
