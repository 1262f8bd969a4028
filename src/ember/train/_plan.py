"""The plan of a run: what a frozen configuration resolves to before anything runs.

``plan_run(config, learner)`` is pure (no file is read or written, no thread started, no
process group joined): it refuses what the run could not do, naming the fix, and resolves what
the configuration leaves implicit::

    the strategy (SingleDevice where none is given), which checks the learner
    the checkpointer (ember's in DIR/checkpoint with the checkpointing strategy, when asked)
    the loggers: the file logs and the given ones (one of them must read values back when the
        summary, early stopping or a checkpointing strategy need them)
    the metrics, registered per split; the schedule of rounds (max_steps, validate_every,
        checkpoint_every) and why mid-round checkpoints cannot be taken, if they cannot
    the submodules to checkpoint (gradient checkpointing), the callbacks (and hooks) called at
        each point, whether the gradient norm is measured
    refusals: a metric-driven scheduler or strategy reading a metric nobody registered, a
        validation value in a run that trains only, tests without what they need, a schedule
        the checkpointer cannot follow

The loop (``_loop.py``) reads the configuration through the plan (``plan.config``); nothing of
it is copied. Where training starts (a checkpoint to resume from) is read from disk by the
session (``_session.py``), not here; so is the directory the run writes, when it is another
than the one given (a ``versioned()`` run's version, or a free sibling of a directory that holds
an earlier run: ``_directory.py``): :func:`moved` then takes the default checkpointer and the
file logs there.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ember._protocols import member
from ember.data import DataLoader
from ember.train._callbacks.called import CalledCallbacks
from ember.train._callbacks.time_limit import TimeLimit
from ember.train._checkpoint.checkpointer import MidRoundCheckpointer, RunCheckpointer
from ember.train._checkpoint.learning import LearningCheckpointer
from ember.train._checkpoint.strategy import (
    ComposedCheckpointingStrategy,
    KeepLastNCheckpoints,
    MetricCheckpointingStrategy,
    default_checkpointing_strategy,
)
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._early_stopping import MetricEarlyStoppingStrategy
from ember.train._gradient_checkpointing import checkpointed_modules
from ember.train._learner import Learner
from ember.train._logger.base import MetricLogger
from ember.train._metric.base import Metric
from ember.train._metric.grad_norm import GradNormMetric
from ember.train._metric.registered import MetricsTraining
from ember.train._metric.resumable import has_metric_state
from ember.train._schedule import Schedule, check_schedule, steps_per_pass
from ember.train._strategy.base import StrategyDefaults, SupervisedLearningStrategy, pass_size
from ember.train._strategy.single import SingleDevice
from ember.train._tracking import run_loggers
from ember.train._valid_sets import loader_key, logged_names
from ember.train._vocabulary import Split
from ember.train._window import check_optimizer_step

__all__ = ["RunPlan", "moved", "plan_run", "same_training_facts"]


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A run as it will go: its configuration and what :func:`plan_run` resolved from it."""

    config: TrainingConfig
    strategy: SupervisedLearningStrategy
    checkpointer: RunCheckpointer | None
    loggers: tuple[MetricLogger, ...]
    metrics: MetricsTraining
    schedule: Schedule
    mid_round_blocker: str | None
    """Why no mid-round checkpoint can be taken, or None: they can."""
    gradient_checkpointing: tuple[str, ...] | None
    """Dotted names of the submodules to checkpoint, or None: off."""
    callbacks: CalledCallbacks
    """What the loop calls at each point: the model's hooks (those of the four it has), then
    ``with_hooks``' objects, ``with_callbacks``' callbacks, and ``max_time``'s, in this
    order."""
    measure_grad_norm: bool

    @property
    def main(self) -> bool:
        """Whether this process writes the run's files and renders (the only one, or rank 0)."""
        return self.strategy.is_main

    @property
    def writes_files(self) -> bool:
        """Whether this process writes the run directory's files: the main process, unless the
        run keeps nothing (``fast_dev_run``)."""
        return self.strategy.is_main and self.config.keeps_files

    @property
    def validates(self) -> bool:
        """False when the run trains only (no valid loader, no valid split)."""
        return self.config.valid is not None

    @property
    def train_metrics(self) -> list[Metric]:
        """The metrics the main process updates on the train split (a mid-round checkpoint
        holds their running states)."""
        return self.metrics.metrics(Split.TRAIN)


def plan_run(config: TrainingConfig, learner: Learner[Any]) -> RunPlan:
    """The plan of ``config``'s run with ``learner`` (see the module doc); refusals raise
    TypeError/ValueError before anything runs."""
    strategy = config.strategy or SingleDevice()
    member(strategy, StrategyDefaults, "check")(learner)
    check_optimizer_step(
        learner,
        strategy,
        accumulation=config.grads_accumulation,
        clipping=config.clipping,
        precision=config.precision,
    )
    _check_monitor(config, learner)
    _check_metric_names(config)
    checkpointer = _checkpointer(config)
    _check_tests(config, checkpointer)
    metrics = MetricsTraining()
    for split, metric in config.metrics:
        metrics.register(split, metric)
    for name, _ in config.valid_sets:  # its own copies of the valid metrics
        metrics.add_valid_set(name)
    schedule = Schedule(
        config.num_epochs if config.max_steps is None or config.epochs_given else None,
        config.max_steps,
        config.validate_every,
        config.checkpoint_every,
    )
    blocker = _mid_round_blocker(checkpointer, metrics.metrics(Split.TRAIN))
    per_pass = steps_per_pass(config.train_loader, config.grads_accumulation)
    check_schedule(schedule, config.valid, checkpointer is not None, blocker, per_pass)
    modules = config.gradient_checkpointing
    if modules is not None:
        modules = checkpointed_modules(learner.model, modules or None)
    return RunPlan(
        config,
        strategy,
        checkpointer,
        tuple(run_loggers(config)),
        metrics,
        schedule,
        blocker,
        modules,
        CalledCallbacks(_callbacks(config), model=learner.model),
        any(isinstance(metric, GradNormMetric) for _, metric in config.metrics),
    )


def moved(plan: RunPlan, config: TrainingConfig) -> RunPlan:
    """``plan`` for ``config``, its run in the directory the session claimed (see the module
    doc): the default checkpointer and the file logs go there with it."""
    if config is plan.config:
        return plan
    return dataclasses.replace(
        plan, config=config, checkpointer=_checkpointer(config), loggers=tuple(run_loggers(config))
    )


def _callbacks(config: TrainingConfig) -> tuple[object, ...]:
    """The run's callbacks after the model's hooks: the builder's, then the settings that are
    callbacks (``max_time``)."""
    made = () if config.max_time is None else (TimeLimit(config.max_time),)
    return (*config.hooks, *config.callbacks, *made)


def _checkpointer(config: TrainingConfig) -> RunCheckpointer | None:
    checkpointer = config.checkpointer
    if checkpointer == DEFAULT_CHECKPOINTERS:
        strategy = config.checkpointing_strategy or (
            default_checkpointing_strategy()
            if config.valid is not None
            else KeepLastNCheckpoints(2)  # train only: no valid Loss to keep the best of
        )
        return LearningCheckpointer(config.directory / "checkpoint", strategy)
    assert not isinstance(checkpointer, str)
    return checkpointer


def _mid_round_blocker(
    checkpointer: RunCheckpointer | None, train_metrics: Sequence[Metric]
) -> str | None:
    """Why this run cannot take mid-round checkpoints, or None: its checkpointer takes them and
    every train metric saves its running state (``StatefulMetric``)."""
    if checkpointer is None:
        return "there are no checkpointers"
    if not isinstance(checkpointer, MidRoundCheckpointer):
        return (
            f"the checkpointer {checkpointer!r} takes no mid-round checkpoints (it has no "
            "checkpoint_mid_round, restore_mid_round and latest_complete_point)"
        )
    for metric in train_metrics:
        if not has_metric_state(metric):
            return (
                f"the train metric {metric.name!r} ({type(metric).__name__}) cannot save its "
                "running state: give it state_dict() and load_state_dict() (docs/training.md, "
                '"Mid-round checkpoints"), or register it for the valid split only'
            )
    return None


def same_training_facts(
    plan: RunPlan, loaders: Mapping[str, DataLoader[Any]], starting_round: int, step: int | None
) -> dict[str, int]:
    """What every process must share, by the name a disagreement is reported under."""
    config = plan.config
    train_items, train_batches = pass_size(loaders["train"])
    valid_items, valid_batches = pass_size(loaders["valid"]) if "valid" in loaders else (0, 0)
    sets = [pass_size(loaders[loader_key(name)]) for name, _ in config.valid_sets]
    names = ",".join(name for name, _ in config.valid_sets)
    return {
        "the starting epoch (is the checkpoint directory visible to every rank?)": (starting_round),
        "the step resumed from (0: a round end)": step or 0,
        "num_epochs": config.num_epochs,
        "max_steps": plan.schedule.max_steps or 0,
        "grads_accumulation": config.grads_accumulation or 0,
        "the train loader's items": train_items,
        "the train loader's batches": train_batches,
        "the valid loader's items": valid_items,
        "the valid loader's batches": valid_batches,
        # as many facts whatever the sets, so that every rank compares the same ones
        "the other validation sets": len(sets),
        "the other validation sets' names (their CRC-32)": zlib.crc32(names.encode("utf-8")),
        "the other validation sets' items": _sum_sizes(size[0] for size in sets),
        "the other validation sets' batches": _sum_sizes(size[1] for size in sets),
        "checkpointers": int(plan.checkpointer is not None),
        "early stopping": int(config.early_stopping is not None),
    }


def _sum_sizes(sizes: Iterable[int]) -> int:
    """The sum of pass sizes, -1 when one is unknown (a stream)."""
    sizes = list(sizes)
    return -1 if -1 in sizes else sum(sizes)


# --- refusals --------------------------------------------------------------------------------


def _check_tests(config: TrainingConfig, checkpointer: RunCheckpointer | None) -> None:
    """``with_test`` needs the valid split's metrics, and checkpoints to take weights from."""
    if not config.tests:
        return
    _check_validation(config, "with_test (it evaluates with the valid split's metrics)")
    if not any(split is Split.VALID for split, _ in config.metrics):
        raise ValueError(
            "with_test evaluates with the valid split's metrics, and none is registered: "
            "add one (e.g. metric_valid_numeric(LossMetric()) or metrics(...))"
        )
    if config.test_checkpoint is not None and checkpointer is None:
        raise ValueError(
            f"with_test(checkpoint={config.test_checkpoint!r}) takes the weights from a "
            "checkpoint: call with_default_checkpointers(), or pass checkpoint=None to "
            "evaluate the model as trained"
        )


def _check_monitor(config: TrainingConfig, learner: Learner[Any]) -> None:
    """A metric-driven scheduler's metric must be registered on the validation split."""
    monitor = learner.monitor
    if monitor is None:
        return
    _check_validation(config, f"the scheduler stepped with the validation metric {monitor!r}")
    valid = sorted(logged_names(config.metrics, config.valid_sets, Split.VALID))
    if monitor not in valid:
        raise ValueError(
            f"the scheduler is stepped with the validation metric {monitor!r}, which is not "
            f"registered on the valid split (registered: {valid}); register it with "
            f"metric_valid_numeric(...)"
        )


def _read_metrics(config: TrainingConfig) -> list[tuple[str, str, Split]]:
    """``(who, metric, split)`` for each metric early stopping or a checkpointing strategy
    reads."""
    wanted: list[tuple[str, str, Split]] = []
    if isinstance(config.early_stopping, MetricEarlyStoppingStrategy):
        stopping = config.early_stopping
        wanted.append(("early stopping", stopping.name, stopping.split))
    strategies: list[Any] = []
    if config.checkpointing_strategy is not None:
        strategies.append(config.checkpointing_strategy)
    if isinstance(config.checkpointer, LearningCheckpointer):
        strategies.append(config.checkpointer.strategy)
    while strategies:
        strategy = strategies.pop()
        if isinstance(strategy, ComposedCheckpointingStrategy):
            strategies.extend(strategy.strategies)
        elif isinstance(strategy, MetricCheckpointingStrategy):
            wanted.append(("the checkpointing strategy", strategy.name, strategy.split))
    return wanted


def _check_metric_names(config: TrainingConfig) -> None:
    """The metrics early stopping and a given checkpointing strategy read must be registered
    on their split: a typo would otherwise only warn, epoch after epoch, and never act."""
    for who, name, split in _read_metrics(config):
        if split is Split.VALID:
            _check_validation(config, f"{who} on the valid metric {name!r}")
        registered = sorted(logged_names(config.metrics, config.valid_sets, split))
        if name not in registered:
            raise ValueError(
                f"{who} reads the metric {name!r} on the {split.value} split, which is not "
                f"registered there (registered: {registered}); register it (metric_"
                f"{split.value}_numeric(...) or metrics(...)) or fix the name"
            )


def _check_validation(config: TrainingConfig, who: str) -> None:
    """Refuse ``who``, which reads validation values, in a run that trains only."""
    if config.valid is None:
        raise ValueError(
            f"{who} needs a validation split, and this run has none: "
            "SupervisedTraining(directory, train) trains only; give it a valid loader, "
            "SupervisedTraining(directory, train, valid), or read a train metric "
            "(split=Split.TRAIN)"
        )
