"""Training strategies: where and how the epoch loop runs.

A custom strategy implements :class:`SupervisedLearningStrategy` (``fit``) and usually builds on
:func:`run_epochs` (the epoch loop: events, checkpoints, early stopping, stops) and
:func:`resume`; see ``examples/custom_strategy.py`` and ``docs/strategies.md``.
"""

from ember.train.strategy.base import (
    FitResult,
    SupervisedLearningStrategy,
    TrainingComponents,
    resume,
    run_epochs,
)
from ember.train.strategy.ddp import DistributedDataParallel
from ember.train.strategy.ddp_outputs import merge_outputs, register_output_merge
from ember.train.strategy.multi import MultiDevice, split_loader
from ember.train.strategy.single import SingleDevice

__all__ = [
    "DistributedDataParallel",
    "FitResult",
    "MultiDevice",
    "SingleDevice",
    "SupervisedLearningStrategy",
    "TrainingComponents",
    "merge_outputs",
    "register_output_merge",
    "resume",
    "run_epochs",
    "split_loader",
]
