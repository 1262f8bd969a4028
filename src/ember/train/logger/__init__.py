"""Metric loggers: files on disk (the default), memory, one CSV file, TensorBoard."""

from ember.train.logger.base import MetricLogger
from ember.train.logger.csv import CsvMetricLogger
from ember.train.logger.file import FileMetricLogger
from ember.train.logger.memory import InMemoryMetricLogger
from ember.train.logger.tensorboard import TensorBoardLogger

__all__ = [
    "CsvMetricLogger",
    "FileMetricLogger",
    "InMemoryMetricLogger",
    "MetricLogger",
    "TensorBoardLogger",
]
