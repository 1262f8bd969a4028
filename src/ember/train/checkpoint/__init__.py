"""Checkpoints: records, atomic verified files, manifests, strategies and the learning checkpointer.

Files are safetensors plus JSON only — loading a checkpoint never runs code (B5). See
:mod:`ember.train.checkpoint.learning` for the layout on disk and the order of operations.
"""

from __future__ import annotations

from ember.train.checkpoint.asynchronous import AsyncCheckpointer
from ember.train.checkpoint.file import Checkpointer, CheckpointFile, FileCheckpointer
from ember.train.checkpoint.learning import LearningCheckpointer, TrainingRecords
from ember.train.checkpoint.manifest import (
    Manifest,
    complete_epochs,
    latest_complete_epoch,
    read_manifest,
    verify_manifest,
    write_manifest,
)
from ember.train.checkpoint.record import (
    Record,
    load_model_record,
    load_nested_record,
    load_optimizer_record,
    model_record,
    nested_record,
    optimizer_record,
    state_record,
)
from ember.train.checkpoint.rng import rng_state, set_rng_state
from ember.train.checkpoint.strategy import (
    CheckpointingAction,
    CheckpointingStrategy,
    ComposedCheckpointingStrategy,
    Delete,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
    Save,
    default_checkpointing_strategy,
)

__all__ = [
    "AsyncCheckpointer",
    "CheckpointFile",
    "Checkpointer",
    "CheckpointingAction",
    "CheckpointingStrategy",
    "ComposedCheckpointingStrategy",
    "Delete",
    "FileCheckpointer",
    "KeepLastNCheckpoints",
    "LearningCheckpointer",
    "Manifest",
    "MetricCheckpointingStrategy",
    "Record",
    "Save",
    "TrainingRecords",
    "complete_epochs",
    "default_checkpointing_strategy",
    "latest_complete_epoch",
    "load_model_record",
    "load_nested_record",
    "load_optimizer_record",
    "model_record",
    "nested_record",
    "optimizer_record",
    "read_manifest",
    "rng_state",
    "set_rng_state",
    "state_record",
    "verify_manifest",
    "write_manifest",
]
