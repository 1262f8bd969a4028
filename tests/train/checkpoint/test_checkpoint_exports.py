"""The public surface of ember.train.checkpoint is pinned."""

from __future__ import annotations

import ember.train.checkpoint as checkpoint

EXPECTED = [
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


def test_exported_names() -> None:
    """__all__ lists exactly the public names and each one exists."""
    assert sorted(checkpoint.__all__) == EXPECTED
    assert all(hasattr(checkpoint, name) for name in EXPECTED)
