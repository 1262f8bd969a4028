"""ember: Burn's Learner and data loaders, rebuilt in Python on PyTorch.

The most used names are re-exported here; everything lives in :mod:`ember.data` and
:mod:`ember.train`.
"""

from ember.data import (
    BatchDataLoader,
    Batcher,
    DataLoader,
    DataLoaderBuilder,
    Dataset,
    InMemDataset,
    MultiThreadDataLoader,
)
from ember.errors import (
    CheckpointError,
    DataLoaderError,
    DistributedError,
    EmberError,
    NonFiniteLossError,
)
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)

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
    "SupervisedTraining",
    "TrainOutput",
]

__version__ = "0.1.0"
