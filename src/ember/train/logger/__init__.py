"""Metric loggers: files on disk (the default) or memory."""

from ember.train.logger.base import MetricLogger
from ember.train.logger.file import FileMetricLogger
from ember.train.logger.memory import InMemoryMetricLogger

__all__ = ["FileMetricLogger", "InMemoryMetricLogger", "MetricLogger"]
