"""Metrics: the protocols, the built-in metrics, and the event store they are logged through."""

from ember.train.metric.accuracy import AccuracyInput, AccuracyMetric
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
from ember.train.metric.iteration_speed import IterationSpeedMetric
from ember.train.metric.learning_rate import LearningRateMetric
from ember.train.metric.loss import LossInput, LossMetric
from ember.train.metric.state import MeanMetric, NumericMetricState
from ember.train.metric.store import Aggregate, Direction, EventStore, MetricQuery, Split

__all__ = [
    "AccuracyInput",
    "AccuracyMetric",
    "Aggregate",
    "Direction",
    "EventStore",
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
    "Split",
    "adapt",
    "register_adaptor",
]
