"""ember.train: the Learner, the supervised training loop, metrics, logs, renderers, checkpoints.

What a user writes: the model's steps (``LearnerModel``, ``TrainOutput``), the ``Learner``, the
``SupervisedTraining`` builder and what it is given (metrics, loggers, renderers, schedulers,
checkpointing, early stopping, strategies); after training, the ``EvaluatorBuilder``,
``predict`` and ``load_checkpoint``/``export_weights`` for a run's best weights. Protocols and
events for writing one's own strategy, renderer, logger or metric are in :mod:`ember.extend`.
See ``docs/training.md``.
"""

from ember._errors import RunDirectoryError, TrainingError
from ember._moved import moved_names
from ember.train._builder import SupervisedTraining
from ember.train._callbacks.base import Callback, RunView
from ember.train._callbacks.ema import EMA
from ember.train._callbacks.profiler import Profiler
from ember.train._callbacks.swa import SWA
from ember.train._checkpoint.export import export_weights, load_checkpoint
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.pretrained import export_pretrained
from ember.train._checkpoint.strategy import (
    ComposedCheckpointingStrategy,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
)
from ember.train._early_stopping import MetricEarlyStoppingStrategy, StoppingCondition
from ember.train._evaluation.evaluator import Evaluator, EvaluatorBuilder
from ember.train._evaluation.prediction import iter_predictions, predict
from ember.train._events import TrainingItem
from ember.train._gradient_checkpointing import GradientCheckpointing, apply_gradient_checkpointing
from ember.train._hooks import Hooks, Stateful, TrainingHooks
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._logger.csv import CsvMetricLogger
from ember.train._logger.file import FileMetricLogger
from ember.train._logger.memory import InMemoryMetricLogger
from ember.train._logger.mlflow import MLflowLogger
from ember.train._logger.optuna import OptunaPruning
from ember.train._logger.tensorboard import TensorBoardLogger
from ember.train._logger.wandb import WandbLogger
from ember.train._lr_find import LrFindResult, lr_find
from ember.train._lr_scheduler.base import LrScheduler
from ember.train._lr_scheduler.composed import ComposedLr, SequentialLr
from ember.train._lr_scheduler.schedules import (
    ConstantLr,
    CosineAnnealingLr,
    ExponentialLr,
    LinearLr,
    NoamLr,
    StepLr,
)
from ember.train._lr_scheduler.torch_adapter import TorchLrScheduler
from ember.train._metric.accuracy import AccuracyMetric
from ember.train._metric.auroc import AurocMetric
from ember.train._metric.base import Metric, Numeric
from ember.train._metric.confusion import (
    ClassReduction,
    FBetaScoreMetric,
    PrecisionMetric,
    RecallMetric,
)
from ember.train._metric.cpu import CpuMemory, CpuUse
from ember.train._metric.cuda import CudaMetric
from ember.train._metric.error_rate import CharErrorRate, WordErrorRate
from ember.train._metric.grad_norm import GradNormMetric
from ember.train._metric.hamming import HammingScore
from ember.train._metric.iteration_speed import IterationSpeedMetric
from ember.train._metric.learning_rate import LearningRateMetric
from ember.train._metric.logged import ValueMetric
from ember.train._metric.loss import LossMetric
from ember.train._metric.perplexity import PerplexityMetric
from ember.train._metric.top_k import TopKAccuracyMetric
from ember.train._metric.torchmetric import TorchMetric
from ember.train._options import EarlyStoppingOptions, Every, Limits, TrainingOptions
from ember.train._outputs import (
    CausalLMOutput,
    ClassificationOutput,
    LossOutput,
    MultiLabelClassificationOutput,
    RegressionOutput,
    SequenceOutput,
)
from ember.train._processor import AsyncProcessorTraining, FullEventProcessorTraining
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._renderer.default import default_renderer
from ember.train._renderer.notebook import NotebookMetricsRenderer
from ember.train._renderer.tui.renderer import TuiMetricsRenderer
from ember.train._result import LearningResult
from ember.train._step import (
    GradientsParams,
    InferenceStep,
    LearnerModel,
    StepContext,
    TrainOutput,
    TrainStep,
    current_step,
)
from ember.train._strategy.base import SupervisedLearningStrategy
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from ember.train._strategy.fsdp.strategy import FullyShardedDataParallel
from ember.train._strategy.multi import MultiDevice
from ember.train._strategy.single import SingleDevice
from ember.train._summary import EvaluationSummary, LearnerSummary, MetricSummary, TestValue
from ember.train._vocabulary import Direction, Split

__all__ = [
    "EMA",
    "SWA",
    "AccuracyMetric",
    "AsyncProcessorTraining",
    "AurocMetric",
    "Callback",
    "CausalLMOutput",
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
    "EarlyStoppingOptions",
    "EvaluationSummary",
    "Evaluator",
    "EvaluatorBuilder",
    "Every",
    "ExponentialLr",
    "FBetaScoreMetric",
    "FileCheckpointer",
    "FileMetricLogger",
    "FullEventProcessorTraining",
    "FullyShardedDataParallel",
    "GradNormMetric",
    "GradientCheckpointing",
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
    "Limits",
    "LinearLr",
    "LossMetric",
    "LossOutput",
    "LrFindResult",
    "LrScheduler",
    "MLflowLogger",
    "Metric",
    "MetricCheckpointingStrategy",
    "MetricEarlyStoppingStrategy",
    "MetricSummary",
    "MultiDevice",
    "MultiLabelClassificationOutput",
    "NoamLr",
    "NotebookMetricsRenderer",
    "Numeric",
    "OptunaPruning",
    "PerplexityMetric",
    "PrecisionMetric",
    "Profiler",
    "RecallMetric",
    "RegressionOutput",
    "RunDirectoryError",
    "RunView",
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
    "TrainStep",
    "TrainingError",
    "TrainingHooks",
    "TrainingItem",
    "TrainingOptions",
    "TuiMetricsRenderer",
    "ValueMetric",
    "WandbLogger",
    "WordErrorRate",
    "apply_gradient_checkpointing",
    "current_step",
    "default_renderer",
    "export_pretrained",
    "export_weights",
    "iter_predictions",
    "load_checkpoint",
    "lr_find",
    "predict",
]

# 0.1.0's names that moved or went (ember/_moved.py)
__getattr__ = moved_names(__name__)
