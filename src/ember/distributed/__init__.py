"""ember.distributed: processes for data-parallel training.

``torchrun`` launches real jobs; :func:`spawn` starts ``world_size`` local processes for quick runs
and tests (see ``docs/strategies.md``). Ranks exchange tensors only, never pickles.
"""

from ember._errors import DistributedError
from ember._moved import moved_names
from ember.distributed._processes import spawn

__all__ = [
    "DistributedError",
    "spawn",
]

# 0.1.0's names that moved or went (ember/_moved.py)
__getattr__ = moved_names(__name__)
