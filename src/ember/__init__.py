"""ember: Burn's Learner and data loaders, rebuilt in Python on PyTorch.

The most used names are re-exported here; everything lives in :mod:`ember.data` and
:mod:`ember.train`, except :func:`cli` (an experiment's command line, ``ember[cli]``).
"""

from ember._errors import (
    CheckpointError,
    DataLoaderError,
    DistributedError,
    EmberError,
    NonFiniteLossError,
    RunDirectoryError,
    RunFileError,
    TrainingError,
)
from ember._experiment_cli import cli
from ember._version import __version__ as __version__
from ember.data._batcher import Batcher
from ember.data._builder import DataLoaderBuilder
from ember.data._dataset import Dataset, InMemDataset
from ember.data._loader import BatchDataLoader, DataLoader
from ember.data._multithread import MultiThreadDataLoader
from ember.train._builder import SupervisedTraining
from ember.train._learner import Learner
from ember.train._metric.accuracy import AccuracyMetric
from ember.train._metric.loss import LossMetric
from ember.train._outputs import ClassificationOutput, RegressionOutput
from ember.train._result import LearningResult
from ember.train._step import LearnerModel, TrainOutput

__all__ = [
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
    "RunFileError",
    "SupervisedTraining",
    "TrainOutput",
    "TrainingError",
    "cli",
]
