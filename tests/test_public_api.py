"""The public surface: the names of DESIGN.md are exported, and only on purpose."""

from __future__ import annotations

import subprocess
import sys

import ember
import ember.train

DESIGN_NAMES_TRAIN = {
    # DESIGN §2 and §4: the names users' code and outside checks are written against
    "TrainStep",
    "InferenceStep",
    "LearnerModel",
    "TrainOutput",
    "GradientsParams",
    "GradientsAccumulator",
    "LrScheduler",
    "Learner",
    "SupervisedTraining",
    "LearningResult",
    "TrainingItem",
    "AsyncProcessorTraining",
    "FullEventProcessorTraining",
    "Metric",
    "Numeric",
    "LossMetric",
    "AccuracyMetric",
    "LearningRateMetric",
    "IterationSpeedMetric",
    "FileMetricLogger",
    "InMemoryMetricLogger",
    "CliMetricsRenderer",
    "default_renderer",
    "MetricEarlyStoppingStrategy",
    "StoppingCondition",
    "Interrupter",
    "SingleDevice",
    "SupervisedLearningStrategy",
    "RegressionOutput",
    "ClassificationOutput",
    "LearnerSummary",
}


def test_design_names_are_exported_from_ember_train() -> None:
    """Every name DESIGN.md fixes for ember.train is importable from it and listed in __all__."""
    missing = sorted(DESIGN_NAMES_TRAIN - set(ember.train.__all__))
    assert missing == []
    for name in ember.train.__all__:
        assert hasattr(ember.train, name), name


TOP_LEVEL = {
    "AccuracyMetric",
    "BatchDataLoader",
    "Batcher",
    "CheckpointError",
    "ClassificationOutput",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderError",
    "DistributedError",
    "Dataset",
    "EmberError",
    "InMemDataset",
    "Learner",
    "LearnerModel",
    "LearningResult",
    "LossMetric",
    "MultiThreadDataLoader",
    "NonFiniteLossError",
    "RegressionOutput",
    "SupervisedTraining",
    "TrainOutput",
}


def test_top_level_exports_are_pinned() -> None:
    """`ember` re-exports exactly the most used names, each the same object as in its package."""
    assert set(ember.__all__) == TOP_LEVEL
    for name in TOP_LEVEL:
        home = ember.train if hasattr(ember.train, name) else None
        if home is not None:
            assert getattr(ember, name) is getattr(home, name)


def test_import_starts_no_thread_and_loads_no_extra() -> None:
    """`import ember` starts no thread and imports no optional dependency (B10)."""
    code = (
        "import threading, sys, ember;"
        "print(threading.active_count());"
        "print(sorted(m for m in ('tensorboard', 'matplotlib', 'torchmetrics', 'sklearn', "
        "'rich', 'mlflow') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[0] == "1"
    assert out[1] == "[]"
