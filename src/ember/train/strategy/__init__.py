"""Training strategies: where and how the epoch loop runs."""

from ember.train.strategy.base import FitResult, SupervisedLearningStrategy, TrainingComponents
from ember.train.strategy.single import SingleDevice

__all__ = ["FitResult", "SingleDevice", "SupervisedLearningStrategy", "TrainingComponents"]
