"""A training run's configuration: what the ``SupervisedTraining`` builder was given.

The builder validates each value at its call and keeps them in one frozen
:class:`TrainingConfig` (a new one per call); ``launch`` (``_launch.py``) reads it and owns the
run's mutable state. So a builder can be launched twice, and a configuration can be looked at
(``SupervisedTraining.config``) without touching what is running.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ember.data import DataLoader
from ember.train._checkpoint.export import CheckpointEpoch
from ember.train._checkpoint.run import RunCheckpointer
from ember.train._checkpoint.strategy import CheckpointingStrategy
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._hooks import Stateful, TrainingHooks
from ember.train._interrupter import Interrupter
from ember.train._logger.base import MetricLogger
from ember.train._metric.base import Metric
from ember.train._precision import Precision
from ember.train._renderer.base import MetricsRenderer
from ember.train._schedule import EVERY_EPOCH, Every
from ember.train._strategy.base import SupervisedLearningStrategy
from ember.train._vocabulary import Split
from ember.train._window import Clipping

__all__ = ["DEFAULT_CHECKPOINTERS", "Resume", "TrainingConfig"]

DEFAULT_CHECKPOINTERS = "default"
"""``checkpointer`` value meaning: ember's checkpointer in ``directory/checkpoint``, made at launch
with the configured checkpointing strategy."""

Resume = int | Literal["latest"] | None
"""Where a run starts: after a checkpointed epoch, after the newest complete one, or afresh."""


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """Everything a run is configured with (see the builder's methods for each field)."""

    directory: Path
    train: DataLoader[Any]
    valid: DataLoader[Any] | None
    """None: train only (no valid split)."""
    metrics: tuple[tuple[Split, Metric], ...] = ()
    summary_metrics: frozenset[str] = frozenset()
    num_epochs: int = 1
    epochs_given: bool = False
    """Whether ``num_epochs`` was called: with ``max_steps`` alone, epochs do not bound the run."""
    max_steps: int | None = None
    validate_every: Every = EVERY_EPOCH
    checkpoint_every: Every | None = None
    """None: every validation round is checkpointed (the checkpointing strategy decides)."""
    grads_accumulation: int | None = None
    mean_accumulation: bool = False
    precision: Precision = "32"
    clipping: Clipping | None = None
    compile_options: dict[str, Any] | None = None
    """``nn.Module.compile`` keyword arguments, or None: not compiled."""
    hooks: tuple[TrainingHooks, ...] = ()
    stateful: tuple[tuple[str, Stateful], ...] = ()
    gradient_checkpointing: tuple[str, ...] | None = None
    """Dotted submodule names; ``()`` means the model's direct children; None: off."""
    renderer: MetricsRenderer | None = None
    summary: bool = False
    loggers: tuple[MetricLogger, ...] = ()
    application_log: Path | None = None
    strategy: SupervisedLearningStrategy | None = None
    interrupter: Interrupter = field(default_factory=Interrupter)
    early_stopping: EarlyStoppingStrategy | None = None
    checkpointer: RunCheckpointer | Literal["default"] | None = None
    checkpointing_strategy: CheckpointingStrategy | None = None
    resume: Resume = None
    tests: tuple[tuple[str, DataLoader[Any]], ...] = ()
    """Evaluated after training (``with_test``), from the checkpoint ``test_checkpoint``."""
    test_checkpoint: CheckpointEpoch | None = "best"
    file_logs: bool = True
    """False: no ``FileMetricLogger`` on the directory beside the given loggers."""
    hparams: Mapping[str, Any] = field(default_factory=dict)
    """The user's own entries of the run's configuration (``config.json``)."""
    fresh_if_unusable: bool = False
    """With ``resume="latest"``: train from epoch 1 when every checkpoint is unusable."""
    overwrite: bool = False
    """A fresh run removes what an earlier run wrote in the directory (else it is refused)."""
    versioned: bool = False
    """The run goes into ``directory/version_N`` (``_run_directory.versioned_run``)."""
    errors_in_result: bool = False
    """A failed training is returned in ``LearningResult.error``, not raised (Burn's way)."""
