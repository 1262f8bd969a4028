"""Metrics: the protocols, the built-in metrics, and the event store they are logged through."""

from ember.train.metric.accuracy import AccuracyInput, AccuracyMetric
from ember.train.metric.auroc import AurocMetric
from ember.train.metric.base import (
    Metric,
    MetricAttributes,
    MetricDefinition,
    MetricEntry,
    MetricMetadata,
    Numeric,
    NumericEntry,
    adapt,
    register_adaptor,
)
from ember.train.metric.confusion import (
    ClassReduction,
    ConfusionStatsInput,
    FBetaScoreMetric,
    PrecisionMetric,
    RecallMetric,
)
from ember.train.metric.cpu import CpuMemory, CpuUse
from ember.train.metric.cuda import CudaMetric, GpuReading
from ember.train.metric.error_rate import CerInput, CharErrorRate, WerInput, WordErrorRate
from ember.train.metric.hamming import HammingScore, HammingScoreInput
from ember.train.metric.iteration_speed import IterationSpeedMetric
from ember.train.metric.learning_rate import LearningRateMetric
from ember.train.metric.loss import LossInput, LossMetric
from ember.train.metric.perplexity import PerplexityInput, PerplexityMetric
from ember.train.metric.ratio import RatioMetric
from ember.train.metric.state import MeanMetric, NumericMetricState
from ember.train.metric.store import Aggregate, Direction, EventStore, MetricQuery, Split
from ember.train.metric.top_k import TopKAccuracyInput, TopKAccuracyMetric
from ember.train.metric.torchmetric import NumericTorchMetric, TorchMetric

__all__ = [
    "AccuracyInput",
    "AccuracyMetric",
    "Aggregate",
    "AurocMetric",
    "CerInput",
    "CharErrorRate",
    "ClassReduction",
    "ConfusionStatsInput",
    "CpuMemory",
    "CpuUse",
    "CudaMetric",
    "Direction",
    "EventStore",
    "FBetaScoreMetric",
    "GpuReading",
    "HammingScore",
    "HammingScoreInput",
    "IterationSpeedMetric",
    "LearningRateMetric",
    "LossInput",
    "LossMetric",
    "MeanMetric",
    "Metric",
    "MetricAttributes",
    "MetricDefinition",
    "MetricEntry",
    "MetricMetadata",
    "MetricQuery",
    "Numeric",
    "NumericEntry",
    "NumericMetricState",
    "NumericTorchMetric",
    "PerplexityInput",
    "PerplexityMetric",
    "PrecisionMetric",
    "RatioMetric",
    "RecallMetric",
    "Split",
    "TopKAccuracyInput",
    "TopKAccuracyMetric",
    "TorchMetric",
    "WerInput",
    "WordErrorRate",
    "adapt",
    "register_adaptor",
]
