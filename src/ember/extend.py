"""ember.extend: what authors of strategies, renderers, loggers, metrics and checkpointing or
early-stopping strategies build on.

The protocols each extension point implements, the events the loop emits, and the values that
travel with them. A plain class with the protocol's members is an extension; see
``docs/design.md`` for the contracts and the event order.
"""

from ember._rundir.atomic import CheckpointFile
from ember._rundir.metric_logs import NumericEntry
from ember.data._pass import Progress
from ember.train._checkpoint.checkpointer import (
    MidRoundCheckpointer,
    RunCheckpointer,
    TrainingRecords,
)
from ember.train._checkpoint.file import Checkpointer
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.record import Record
from ember.train._checkpoint.strategy import (
    CheckpointingAction,
    CheckpointingStrategy,
    Delete,
    Save,
)
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._events import (
    End,
    EndEpoch,
    EndEvaluation,
    EndSplit,
    EndTest,
    EvaluatorEvent,
    LearnerEvent,
    ProcessedItem,
    Start,
    StartEvaluation,
    StartSplit,
    StartTest,
    TrainingItem,
)
from ember.train._hooks import Stateful, TrainingHooks
from ember.train._logger.base import Logger, MetricLogger, MetricReader, ResumableLogger
from ember.train._metric.accuracy import AccuracyInput
from ember.train._metric.base import (
    Metric,
    MetricAttributes,
    MetricDefinition,
    MetricEntry,
    MetricMetadata,
    Numeric,
    adapt,
    register_adaptor,
)
from ember.train._metric.confusion import ConfusionStatsInput
from ember.train._metric.error_rate import CerInput, WerInput
from ember.train._metric.hamming import HammingScoreInput
from ember.train._metric.loss import LossInput
from ember.train._metric.perplexity import PerplexityInput
from ember.train._metric.query import MetricQuery
from ember.train._metric.resumable import StatefulMetric
from ember.train._metric.state import MeanMetric
from ember.train._metric.top_k import TopKAccuracyInput
from ember.train._metric.values import MetricState, MetricText, MetricValue
from ember.train._outputs import ItemLazy
from ember.train._processor import EventProcessor
from ember.train._renderer.base import EvaluationRenderer, MetricsRenderer, Renderer
from ember.train._step import StepContext, current_step
from ember.train._strategy.base import (
    LocalRun,
    StrategyRun,
    SupervisedLearningStrategy,
    add_gradients,
    with_progress,
)
from ember.train._strategy.ddp.outputs import merge_outputs, register_output_merge
from ember.train._vocabulary import Direction, Split

__all__ = [
    "AccuracyInput",
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
    "Logger",
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
    "MidRoundCheckpointer",
    "Numeric",
    "NumericEntry",
    "PerplexityInput",
    "ProcessedItem",
    "Progress",
    "Record",
    "Renderer",
    "ResumableLogger",
    "ResumePoint",
    "RunCheckpointer",
    "Save",
    "Split",
    "Start",
    "StartEvaluation",
    "StartSplit",
    "StartTest",
    "Stateful",
    "StatefulMetric",
    "StepContext",
    "StrategyRun",
    "SupervisedLearningStrategy",
    "TopKAccuracyInput",
    "TrainingHooks",
    "TrainingItem",
    "TrainingRecords",
    "WerInput",
    "adapt",
    "add_gradients",
    "current_step",
    "merge_outputs",
    "register_adaptor",
    "register_output_merge",
    "with_progress",
]
