"""A rank's place in a ``DistributedDataParallel`` job, shared by the strategy's modules.

:class:`Ranks` is what every distributed piece of a fit needs to know about this process: its
rank, the world size, its device, and the process group that carries small CPU messages (flags,
headers, RNG states) whatever the backend of the gradients.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

__all__ = ["Ranks"]


@dataclasses.dataclass(frozen=True, slots=True)
class Ranks:
    """This process's place in the job; ``cpu`` is the group for small CPU messages."""

    rank: int
    world: int
    device: torch.device
    cpu: Any  # a ProcessGroup, or None for the default group

    @property
    def is_main(self) -> bool:
        return self.rank == 0
