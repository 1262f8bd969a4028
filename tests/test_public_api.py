"""The public surface, pinned: each namespace's ``__all__``, its docstrings, ``docs/api.md``.

A name added to or removed from a public ``__all__`` fails here until the set below and
``docs/api.md`` say so: the public surface changes on purpose only.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"

EMBER = {
    "AccuracyMetric",
    "BatchDataLoader",
    "Batcher",
    "CheckpointError",
    "ClassificationOutput",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderError",
    "Dataset",
    "DistributedError",
    "EmberError",
    "InMemDataset",
    "Learner",
    "LearnerModel",
    "LearningResult",
    "LossMetric",
    "MultiThreadDataLoader",
    "NonFiniteLossError",
    "RegressionOutput",
    "RunDirectoryError",
    "SupervisedTraining",
    "TrainOutput",
    "TrainingError",
}

DATA = {
    "BatchDataLoader",
    "BatchFn",
    "Batcher",
    "ComposedDataset",
    "DataLoader",
    "DataLoaderBuilder",
    "DataLoaderError",
    "DataLoaderIterator",
    "Dataset",
    "DeviceLike",
    "InMemDataset",
    "MapperDataset",
    "MultiThreadDataLoader",
    "PartialDataset",
    "Progress",
    "SamplerDataset",
    "ShardedDataLoader",
    "ShuffledDataset",
    "StatefulSource",
    "StreamingDataLoader",
    "TorchDataLoader",
    "WindowsDataset",
    "default_collate",
    "move_to_device",
}

TRAIN = {
    "AccuracyMetric",
    "AsyncCheckpointer",
    "AsyncProcessorTraining",
    "AurocMetric",
    "CharErrorRate",
    "ClassReduction",
    "ClassificationOutput",
    "CliMetricsRenderer",
    "ComposedCheckpointingStrategy",
    "ComposedLr",
    "ConstantLr",
    "CosineAnnealingLr",
    "CpuMemory",
    "CpuUse",
    "CsvMetricLogger",
    "CudaMetric",
    "Direction",
    "DistributedDataParallel",
    "EvaluationSummary",
    "Evaluator",
    "EvaluatorBuilder",
    "ExponentialLr",
    "FBetaScoreMetric",
    "FileCheckpointer",
    "FileMetricLogger",
    "FullEventProcessorTraining",
    "FullyShardedDataParallel",
    "GradNormMetric",
    "GradientCheckpointing",
    "GradientsAccumulator",
    "GradientsParams",
    "HammingScore",
    "Hooks",
    "InMemoryMetricLogger",
    "InferenceStep",
    "Interrupter",
    "IterationSpeedMetric",
    "KeepLastNCheckpoints",
    "Learner",
    "LearnerModel",
    "LearnerSummary",
    "LearningCheckpointer",
    "LearningRateMetric",
    "LearningResult",
    "LinearLr",
    "LossMetric",
    "LrScheduler",
    "MLflowLogger",
    "Metric",
    "MetricCheckpointingStrategy",
    "MetricEarlyStoppingStrategy",
    "MetricSummary",
    "MultiDevice",
    "MultiLabelClassificationOutput",
    "NoamLr",
    "Numeric",
    "OptunaPruning",
    "PerplexityMetric",
    "PrecisionMetric",
    "RecallMetric",
    "RegressionOutput",
    "RunDirectoryError",
    "SequenceOutput",
    "SequentialLr",
    "SingleDevice",
    "Split",
    "Stateful",
    "StepContext",
    "StepLr",
    "StoppingCondition",
    "SupervisedLearningStrategy",
    "SupervisedTraining",
    "TensorBoardLogger",
    "TestValue",
    "TopKAccuracyMetric",
    "TorchLrScheduler",
    "TorchMetric",
    "TrainOutput",
    "TrainingError",
    "TrainStep",
    "TrainingHooks",
    "TrainingItem",
    "TuiMetricsRenderer",
    "WandbLogger",
    "WordErrorRate",
    "apply_gradient_checkpointing",
    "current_step",
    "default_renderer",
    "export_weights",
    "iter_predictions",
    "load_checkpoint",
    "predict",
}

EXTEND = {
    "AccuracyInput",
    "ArtifactLogger",
    "CerInput",
    "CheckpointFile",
    "Checkpointer",
    "CheckpointingAction",
    "CheckpointingStrategy",
    "ConfusionStatsInput",
    "Delete",
    "Direction",
    "EarlyStoppingStrategy",
    "End",
    "EndEpoch",
    "EndEvaluation",
    "EndSplit",
    "EndTest",
    "EvaluationRenderer",
    "EvaluatorEvent",
    "EventProcessor",
    "HammingScoreInput",
    "ItemLazy",
    "LearnerEvent",
    "LocalRun",
    "LossInput",
    "MeanMetric",
    "Metric",
    "MetricAttributes",
    "MetricDefinition",
    "MetricEntry",
    "MetricLogger",
    "MetricMetadata",
    "MetricQuery",
    "MetricReader",
    "MetricState",
    "MetricText",
    "MetricValue",
    "MetricsRenderer",
    "MetricsRendererEvaluation",
    "MetricsRendererTraining",
    "Numeric",
    "NumericEntry",
    "PerplexityInput",
    "ProcessedItem",
    "Progress",
    "Record",
    "RunCheckpointer",
    "Save",
    "Split",
    "Start",
    "StartEvaluation",
    "StartSplit",
    "StartTest",
    "Stateful",
    "StatefulMetric",
    "StepProgressLogger",
    "StoppingLogger",
    "ResumedSplitLogger",
    "ResumePoint",
    "ResumableLogger",
    "MidRoundCheckpointer",
    "StepContext",
    "StrategyRun",
    "SupervisedLearningStrategy",
    "TextLogger",
    "TopKAccuracyInput",
    "TrainingHooks",
    "TrainingItem",
    "TrainingProgressLogger",
    "TrainingRecords",
    "WerInput",
    "adapt",
    "add_gradients",
    "current_step",
    "merge_outputs",
    "register_adaptor",
    "register_output_merge",
    "with_progress",
}

DISTRIBUTED = {
    "DistributedError",
    "spawn",
}

RUNS = {
    "MetricRow",
    "Run",
    "Runs",
    "compare",
    "load",
    "plot",
}

PUBLIC = {
    "ember": EMBER,
    "ember.data": DATA,
    "ember.train": TRAIN,
    "ember.extend": EXTEND,
    "ember.distributed": DISTRIBUTED,
    "ember.runs": RUNS,
}

# The names users' code and outside checks are written against (docs/design.md): a subset of
# ember.train's, kept here so that pruning the surface can never drop one.
DOCUMENTED_NAMES_TRAIN = {
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

OPTIONAL_EXTRAS = (
    "tensorboard",
    "matplotlib",
    "torchmetrics",
    "sklearn",
    "rich",
    "mlflow",
    "optuna",
    "wandb",
    "pandas",
)


def api_page_sections() -> dict[str, dict[str, str]]:
    """``docs/api.md`` read back: for each ``## `namespace``` section, its names and summaries."""
    sections: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in API_PAGE.read_text(encoding="utf-8").splitlines():
        heading = re.fullmatch(r"## `([\w.]+)`", line)
        if heading:
            current = sections.setdefault(heading.group(1), {})
            continue
        entry = re.fullmatch(r"- `(\w+)`: (.*)", line)
        if entry and current is not None:
            current[entry.group(1)] = entry.group(2).strip()
    return sections


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_pinned(name: str) -> None:
    """Each public namespace's ``__all__`` is exactly the set written here, without repeats."""
    exported = importlib.import_module(name).__all__
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    assert set(exported) - PUBLIC[name] == set(), f"{name} exports names not pinned here"
    assert PUBLIC[name] - set(exported) == set(), f"{name} no longer exports pinned names"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_name_is_importable_and_documented(name: str) -> None:
    """Every exported name exists; every class and function has a docstring of its own."""
    module = importlib.import_module(name)
    for public in PUBLIC[name]:
        value = getattr(module, public)  # AttributeError names the missing one
        if inspect.isclass(value) or inspect.isfunction(value):
            doc = (value.__doc__ or "").strip()
            # a dataclass without a docstring gets its signature as one: that is not documentation
            assert doc and not doc.startswith(f"{value.__name__}("), (
                f"{name}.{public}: no docstring"
            )


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_api_page_lists_every_name_with_a_summary(name: str) -> None:
    """``docs/api.md`` has a section per namespace listing exactly its names, each summarised."""
    sections = api_page_sections()
    assert name in sections, f"docs/api.md has no section ## `{name}`"
    listed = sections[name]
    assert set(listed) == PUBLIC[name], (
        f"docs/api.md, ## `{name}`: missing {sorted(PUBLIC[name] - set(listed))}, "
        f"not exported {sorted(set(listed) - PUBLIC[name])}"
    )
    for public, summary in listed.items():
        assert summary, f"docs/api.md: `{public}` in {name} has no summary"


def test_api_page_has_no_other_section() -> None:
    """Every section of ``docs/api.md`` is a public namespace."""
    assert set(api_page_sections()) == set(PUBLIC)


def test_a_name_exported_twice_is_the_same_object() -> None:
    """A name in several namespaces (``ember`` re-exports, ``Direction``...) is one object."""
    homes: dict[str, tuple[str, object]] = {}
    for name in sorted(PUBLIC):
        module = importlib.import_module(name)
        for public in sorted(PUBLIC[name]):
            value = getattr(module, public)
            first = homes.setdefault(public, (name, value))
            assert first[1] is value, f"{name}.{public} is not {first[0]}.{public}"


def test_top_level_names_come_from_the_packages() -> None:
    """``ember`` re-exports only: each of its names is exported by a namespace below it."""
    below = set().union(*(names for name, names in PUBLIC.items() if name != "ember"))
    errors = {"EmberError", "CheckpointError", "NonFiniteLossError"}  # ember's own, raised anywhere
    assert EMBER - below == errors


def test_design_names_are_exported_from_ember_train() -> None:
    """Every name the design fixes for ember.train is importable from it and listed in __all__."""
    assert sorted(DOCUMENTED_NAMES_TRAIN - TRAIN) == []


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_import_starts_no_thread_and_loads_no_extra(name: str) -> None:
    """Importing a namespace starts no thread and imports no optional dependency (fast import)."""
    code = (
        f"import threading, sys, {name};"
        "print(threading.active_count());"
        f"print(sorted(m for m in {OPTIONAL_EXTRAS!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split("\n")
    assert out[0] == "1", f"import {name} started a thread"
    assert out[1] == "[]", f"import {name} loaded optional extras"
