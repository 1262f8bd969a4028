"""Public names that moved or went: where each is now, and what importing it says.

The one table of moved names (``docs/design.md``, "Stability"). A namespace that lost names
serves them from its module ``__getattr__``::

    __getattr__ = moved_names(__name__)

- a **moved** name is the same object as at its new home; the first access warns once
  (``DeprecationWarning``) with the import line to write instead;
- a **deprecated** name still works, warns once, and says what replaces it and the release it
  goes in (the minor release after the one that deprecated it);
- a **removed** name raises ``ImportError`` saying what to use instead (also for
  ``from old import name``, which would otherwise hide the message).

0.1.0's removed modules (``ember.errors``, ``ember.train.checkpoint``, ``ember.train.logger``,
``ember.train.lr_scheduler``, ``ember.train.metric``, ``ember.train.renderer``,
``ember.train.strategy``) are one-line alias modules of this kind. Every entry here is also in
``CHANGELOG.md``; 0.1.0's spellings go in the release named by :data:`REMOVED_IN`.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any, Final, NamedTuple

__all__ = [
    "DEPRECATED",
    "FORMER_CONTRACTS",
    "MOVED",
    "REMOVED",
    "REMOVED_IN",
    "Deprecated",
    "moved_names",
]

REMOVED_IN: Final = "0.3.0"
"""The release in which 0.1.0's moved and deprecated spellings stop working."""

_EXTEND, _TRAIN = "ember.extend", "ember.train"

MOVED: Final[dict[str, dict[str, str]]] = {
    "ember.errors": dict.fromkeys(
        (
            "CheckpointError",
            "DataLoaderError",
            "DistributedError",
            "EmberError",
            "NonFiniteLossError",
        ),
        "ember",
    ),
    "ember.train": dict.fromkeys(
        (
            "AccuracyInput",
            "CerInput",
            "ConfusionStatsInput",
            "EarlyStoppingStrategy",
            "End",
            "EndEpoch",
            "EndSplit",
            "HammingScoreInput",
            "ItemLazy",
            "LearnerEvent",
            "LossInput",
            "MeanMetric",
            "MetricAttributes",
            "MetricDefinition",
            "MetricEntry",
            "MetricLogger",
            "MetricMetadata",
            "MetricState",
            "MetricsRenderer",
            "NumericEntry",
            "PerplexityInput",
            "ProcessedItem",
            "Start",
            "StartSplit",
            "TopKAccuracyInput",
            "WerInput",
            "adapt",
            "merge_outputs",
            "register_adaptor",
            "register_output_merge",
        ),
        _EXTEND,
    ),
    "ember.train.checkpoint": {
        "CheckpointFile": _EXTEND,
        "Checkpointer": _EXTEND,
        "CheckpointingAction": _EXTEND,
        "CheckpointingStrategy": _EXTEND,
        "ComposedCheckpointingStrategy": _TRAIN,
        "Delete": _EXTEND,
        "FileCheckpointer": _TRAIN,
        "KeepLastNCheckpoints": _TRAIN,
        "LearningCheckpointer": _TRAIN,
        "MetricCheckpointingStrategy": _TRAIN,
        "Record": _EXTEND,
        "Save": _EXTEND,
        "TrainingRecords": _EXTEND,
    },
    "ember.train.logger": {
        "CsvMetricLogger": _TRAIN,
        "FileMetricLogger": _TRAIN,
        "InMemoryMetricLogger": _TRAIN,
        "MetricLogger": _EXTEND,
        "TensorBoardLogger": _TRAIN,
    },
    "ember.train.lr_scheduler": dict.fromkeys(
        (
            "ComposedLr",
            "ConstantLr",
            "CosineAnnealingLr",
            "ExponentialLr",
            "LinearLr",
            "LrScheduler",
            "NoamLr",
            "SequentialLr",
            "StepLr",
            "TorchLrScheduler",
        ),
        _TRAIN,
    ),
    "ember.train.metric": {
        **dict.fromkeys(
            (
                "AccuracyMetric",
                "AurocMetric",
                "CharErrorRate",
                "ClassReduction",
                "CpuMemory",
                "CpuUse",
                "CudaMetric",
                "Direction",
                "FBetaScoreMetric",
                "HammingScore",
                "IterationSpeedMetric",
                "LearningRateMetric",
                "LossMetric",
                "Metric",
                "Numeric",
                "PerplexityMetric",
                "PrecisionMetric",
                "RecallMetric",
                "Split",
                "TopKAccuracyMetric",
                "TorchMetric",
                "WordErrorRate",
            ),
            _TRAIN,
        ),
        **dict.fromkeys(
            (
                "AccuracyInput",
                "CerInput",
                "ConfusionStatsInput",
                "HammingScoreInput",
                "LossInput",
                "MeanMetric",
                "MetricAttributes",
                "MetricDefinition",
                "MetricEntry",
                "MetricMetadata",
                "MetricQuery",
                "NumericEntry",
                "PerplexityInput",
                "TopKAccuracyInput",
                "WerInput",
                "adapt",
                "register_adaptor",
            ),
            _EXTEND,
        ),
    },
    "ember.train.renderer": {
        "CliMetricsRenderer": _TRAIN,
        "MetricState": _EXTEND,
        "MetricsRenderer": _EXTEND,
        "default_renderer": _TRAIN,
    },
    "ember.train.strategy": {
        "DistributedDataParallel": _TRAIN,
        "MultiDevice": _TRAIN,
        "SingleDevice": _TRAIN,
        "SupervisedLearningStrategy": _TRAIN,
        "merge_outputs": _EXTEND,
        "register_output_merge": _EXTEND,
    },
}
"""``{old namespace: {name: new namespace}}``: the same object, importable from its new home."""


class Deprecated(NamedTuple):
    """A deprecated name: where the object lives now, what to write instead, and the release
    that deprecated it (the next minor release removes it)."""

    where: str
    instead: str
    since: str = "0.2.0"


_AGGREGATE = Deprecated(
    "ember.train._vocabulary.Aggregate",
    "an epoch's value is always the mean of its batches: drop the argument "
    "(MetricEarlyStoppingStrategy(metric, direction, split, condition), "
    "MetricCheckpointingStrategy(metric, direction, split), query.find_metric(name, epoch, split))",
)

_RENDERER = Deprecated(
    "ember.train._renderer.base.MetricsRenderer",
    "a renderer is one protocol since 0.2.0, both Burn's roles in it: write "
    "`from ember.extend import MetricsRenderer` (or subclass ember.extend.Renderer, whose every "
    "method does nothing)",
)
_ROLES = dict.fromkeys(("MetricsRendererTraining", "TrainingProgressLogger"), _RENDERER)

_ASYNC = (
    "ember's checkpointer writes on its own thread already: with_default_checkpointers(), or "
    "ember.train.LearningCheckpointer(directory, strategy) (asynchronous=True by default); a "
    "Checkpointer of your own writes as it likes"
)
_ASYNC_CHECKPOINTER = "ember.train._checkpoint.asynchronous.AsyncCheckpointer"

DEPRECATED: Final[dict[str, dict[str, Deprecated]]] = {
    "ember.train": {
        "Aggregate": _AGGREGATE,
        **_ROLES,
        "AsyncCheckpointer": Deprecated(_ASYNC_CHECKPOINTER, _ASYNC, "0.3.0"),
        "GradientsAccumulator": Deprecated(
            "ember.train._step.GradientsAccumulator",
            "the loop accumulates gradients in the .grad slots itself: call "
            "grads_accumulation(n) on SupervisedTraining; to add gradients by hand, add the "
            "tensors of the GradientsParams (a mapping of parameter names to gradients)",
            "0.3.0",
        ),
    },
    "ember.train.checkpoint": {"AsyncCheckpointer": Deprecated(_ASYNC_CHECKPOINTER, _ASYNC)},
    "ember.train.metric": {"Aggregate": _AGGREGATE},
    "ember.train.renderer": _ROLES,
}
"""``{old namespace: {name: Deprecated(where it lives now, what to write instead, since)}}``: it
still works."""

_LOOP = (
    "the training loop lives in ember: train with SupervisedTraining(directory, train, valid)"
    ".launch(learner); a custom strategy implements SupervisedLearningStrategy (is_main, start)"
    ' and the loop runs it (docs/strategies.md, "Custom strategies")'
)
_MESSAGES = (
    "ember's messages between ranks are internal; use torch.distributed's own collectives "
    "(broadcast_object_list, all_gather_object, broadcast)"
)
_RECORDS = (
    "checkpoint records are built and read by the run's checkpointer; a custom Checkpointer "
    "receives ember.extend.Record values as they are. To save weights, use "
    "ember.train.export_weights or safetensors.torch.save_file(model.state_dict(), path)"
)
_MANIFESTS = (
    "manifests are internal to LearningCheckpointer: use LearningCheckpointer(directory, "
    "strategy).complete_epochs(), load_checkpoint(directory, epoch, into=model), or read a run "
    "with LearningResult.checkpoints / best_epoch"
)
_RNG = (
    "checkpoints save and restore every RNG state themselves; to do it by hand use "
    "torch.get_rng_state()/torch.set_rng_state(), random.getstate() and numpy's"
)

REMOVED: Final[dict[str, dict[str, str]]] = {
    "ember.distributed": {
        **dict.fromkeys(
            (
                "broadcast_bytes",
                "broadcast_coalesced",
                "gather_bytes",
                "pack_tensors",
                "payload_size",
                "tensor_header",
                "unpack_tensors",
            ),
            _MESSAGES,
        ),
        "collective": (
            "a failed collective raises ember.DistributedError naming the rank by itself; "
            "call torch.distributed's collectives directly"
        ),
        "init_from_environment": (
            "DistributedDataParallel() and FullyShardedDataParallel() set the process group "
            "up from torchrun's environment when a run starts; to do it yourself call "
            "torch.distributed.init_process_group()"
        ),
    },
    "ember.train": {
        **dict.fromkeys(
            (
                "FitResult",
                "TrainingComponents",
                "resume",
                "run_epochs",
                "train_epoch",
                "valid_epoch",
            ),
            _LOOP,
        ),
    },
    "ember.train.checkpoint": {
        **dict.fromkeys(
            (
                "load_model_record",
                "load_nested_record",
                "load_optimizer_record",
                "model_record",
                "nested_record",
                "optimizer_record",
                "state_record",
            ),
            _RECORDS,
        ),
        **dict.fromkeys(
            (
                "Manifest",
                "complete_epochs",
                "latest_complete_epoch",
                "read_manifest",
                "verify_manifest",
                "write_manifest",
            ),
            _MANIFESTS,
        ),
        **dict.fromkeys(("rng_state", "set_rng_state"), _RNG),
        "default_checkpointing_strategy": (
            "with_default_checkpointers() uses it; to build it yourself write "
            "ComposedCheckpointingStrategy([KeepLastNCheckpoints(2), "
            'MetricCheckpointingStrategy("Loss", Direction.LOWEST, Split.VALID)]) '
            "(all from ember.train)"
        ),
    },
    "ember.train.lr_scheduler": {
        "LrSchedulerLike": "annotate with `float | ember.train.LrScheduler`",
        "as_scheduler": (
            "the Learner turns a float into a schedule itself; for a schedule object write "
            "ember.train.ConstantLr(value)"
        ),
    },
    "ember.train.metric": {
        "EventStore": (
            "the run's values are read back with LearningResult.values(split, metric) or "
            "ember.train.FileMetricLogger(directory).read_numeric(...); early stopping and "
            "checkpointing strategies receive an ember.extend.MetricQuery"
        ),
        "GpuReading": "CudaMetric's readings are its logged text entries",
        "NumericMetricState": (
            "a numeric metric's running mean is ember.extend.MeanMetric; a renderer receives "
            "ember.extend.MetricState"
        ),
        "NumericTorchMetric": "write ember.train.TorchMetric(metric, numeric=True)",
        "RatioMetric": (
            "implement ember.train.Numeric (help(ember.train.Numeric)); the "
            "built-in ratio metrics keep their own sums"
        ),
    },
    "ember.train.strategy": {
        **dict.fromkeys(("FitResult", "TrainingComponents", "resume", "run_epochs"), _LOOP),
        "split_loader": "MultiDevice splits each loader over its devices itself",
    },
}
"""``{old namespace: {name: what to use instead}}``: importing it raises ``ImportError``."""

FORMER_CONTRACTS: Final[dict[str, tuple[str, ...]]] = {
    "MetricLogger": ("log_definition", "read_numeric"),
    "SupervisedLearningStrategy": ("fit",),
}
"""Extension protocols whose 0.1.0 contract was replaced, not grown: ``{protocol: 0.1.0's
members that are gone}``. An implementation of the old contract is refused, naming the new."""

_warned: set[str] = set()


def _warn_once(old: str, message: str) -> None:
    if old in _warned:
        return
    _warned.add(old)
    # the user's line: past this function, _lookup and the module's __getattr__
    warnings.warn(message, DeprecationWarning, stacklevel=4)


def _next_minor(release: str) -> str:
    """The minor release after ``release`` (``0.2.0`` -> ``0.3.0``)."""
    major, minor, _ = release.split(".")
    return f"{major}.{int(minor) + 1}.0"


def _resolve(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _lookup(namespace: str, name: str) -> Any:
    old = f"{namespace}.{name}"
    home = MOVED.get(namespace, {}).get(name)
    if home is not None:
        _warn_once(
            old,
            f"{old} moved to {home} in 0.2.0: write `from {home} import {name}` (the old "
            f"spelling stops working in {REMOVED_IN})",
        )
        return getattr(importlib.import_module(home), name)
    kept = DEPRECATED.get(namespace, {}).get(name)
    if kept is not None:
        _warn_once(
            old,
            f"{old} is deprecated since {kept.since} and goes in {_next_minor(kept.since)}: "
            f"{kept.instead}",
        )
        return _resolve(kept.where)
    gone = REMOVED.get(namespace, {}).get(name)
    if gone is not None:
        raise ImportError(f"{old} was removed in ember 0.2.0: {gone}", name=name)
    raise AttributeError(f"module {namespace!r} has no attribute {name!r}")


def moved_names(namespace: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``namespace``: its names that moved, deprecated or removed
    since 0.1.0 (see the module doc); any other name is an ``AttributeError`` as usual."""

    def __getattr__(name: str) -> Any:  # noqa: N807 (the module hook's own name)
        return _lookup(namespace, name)

    return __getattr__
