"""A training run's configuration: what the ``SupervisedTraining`` builder was given.

The builder validates each value at its call and keeps them in one frozen
:class:`TrainingConfig` (a new one per call); ``launch`` (``_training.py``) reads it and owns the
run's mutable state. So a builder can be launched twice, and a configuration can be looked at
(``SupervisedTraining.config``) without touching what is running.

The configuration is also described as JSON, ``DIR/config.json``, written at launch and
handed to every logger's ``start`` (trackers record it as the run's parameters)::

    {"directory": "runs/mnist", "ember_version": "0.2.0", "torch_version": "2.13.0+cpu",
     "num_epochs": 3, "max_steps": null, "validate_every": "epochs=1", "checkpoint_every": null,
     "grads_accumulation": 1, "strategy": "SingleDevice",
     "train": {"batches": 40, "items": 1280, "batch_size": 32, "seed": 7}, "valid": {...},
     "optimizer": {"class": "torch.optim.sgd.SGD", "param_groups": [{"lr": 0.1, ...}]},
     "lr_scheduler": {"class": "...ConstantLr", "state": {...}},
     "metrics": {"train": ["Loss"], "valid": ["Loss"]}, "directions": {"Loss": "lowest"},
     "units": {}, "resume": null, "hparams": {"hidden": 64},
     "cli": {"lr": 0.1, "data": {"batch_size": 64}}}

``directions`` says which way is better for each numeric metric (its attributes'
``higher_is_better``), so that a run read back (``ember compare``) knows its best epoch;
``units`` the unit of each that has one (``{"Accuracy": "%"}``), so that it names the metric as
the run's tables did (``Accuracy (%)``). A run
of several validation sets (``_valid_sets.py``) names its main one in ``"valid": {..., "name":
"clean"}``, describes the others in ``"valid_sets": {"noisy": {"batches": 4, ...}}``, and lists
their values' names (``"Loss (noisy)"``) in ``metrics`` and ``directions``.
``hparams`` holds the user's own entries (``SupervisedTraining.hparams``); ``cli`` the values
``ember.cli`` resolved for the ``main`` that launched the run, keys as ``main`` spells them, or
null (``_experiment.py``). A value the run cannot describe as JSON (an optimizer hyper-parameter
that is a tensor, say) is written as its ``repr``.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from ember._version import __version__
from ember.data import DataLoader, DataModule
from ember.train._checkpoint.checkpointer import RunCheckpointer
from ember.train._checkpoint.export import CheckpointEpoch
from ember.train._checkpoint.strategy import CheckpointingStrategy
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._experiment import current_experiment
from ember.train._hooks import Stateful, TrainingHooks
from ember.train._interrupter import Interrupter
from ember.train._logger.base import MetricLogger
from ember.train._metric.base import Metric, Numeric
from ember.train._precision import Precision
from ember.train._renderer.base import MetricsRenderer
from ember.train._schedule import EVERY_EPOCH, Every
from ember.train._strategy.base import SupervisedLearningStrategy
from ember.train._strategy.single import SingleDevice
from ember.train._valid_sets import ValidSets, logged_names, set_metrics
from ember.train._vocabulary import Direction, Split
from ember.train._window import Clipping

if TYPE_CHECKING:
    from ember.train._learner import Learner
    from ember.train._lr_scheduler.base import LrScheduler

__all__ = [
    "DEFAULT_CHECKPOINTERS",
    "Resume",
    "TrainingConfig",
    "check_hparams",
    "defines_valid",
    "run_configuration",
]

DEFAULT_CHECKPOINTERS = "default"
"""``checkpointer`` value meaning: ember's checkpointer in ``directory/checkpoint``, made at launch
with the configured checkpointing strategy."""

Resume = int | Literal["latest"] | None
"""Where a run starts: after a checkpointed epoch, after the newest complete one, or afresh."""


@dataclass(frozen=True, slots=True)
class TrainingConfig:
    """Everything a run is configured with (see the builder's methods for each field)."""

    directory: Path
    train: DataLoader[Any] | None
    """None only with a data module, until launch takes its loaders (``train_loader``)."""
    valid: DataLoader[Any] | None
    """None: train only (no valid split), or a data module's, until launch. With several
    validation sets, the main one."""
    valid_name: str | None = None
    """The main validation set's name, when ``valid`` was given as ``{name: loader}``."""
    valid_sets: ValidSets = ()
    """The validation sets after the main one, by name (``_valid_sets.py``)."""
    data_module: DataModule | None = None
    """A data module that gives the loaders at launch (``_data_module.py``), or None."""
    seed: int | None = None
    """The seed of torch, numpy and Python's random at launch (``seed``), or None."""
    metrics: tuple[tuple[Split, Metric], ...] = ()
    summary_metrics: frozenset[str] = frozenset()
    num_epochs: int = 1
    epochs_given: bool = False
    """Whether ``num_epochs`` was called: with ``max_steps`` alone, epochs do not bound the run."""
    max_steps: int | None = None
    validate_every: Every = EVERY_EPOCH
    checkpoint_every: Every | None = None
    """None: every validation round is checkpointed (the checkpointing strategy decides)."""
    grads_accumulation: int | None = None
    mean_accumulation: bool = False
    precision: Precision = "32"
    clipping: Clipping | None = None
    compile_options: dict[str, Any] | None = None
    """``nn.Module.compile`` keyword arguments, or None: not compiled."""
    hooks: tuple[TrainingHooks, ...] = ()
    """``with_hooks``' objects (0.2.0's four hooks): called, never checkpointed."""
    callbacks: tuple[object, ...] = ()
    """``with_callbacks``' callbacks: called at every point they have; their state joins the
    checkpoints."""
    max_time: float | None = None
    """Seconds of training after which the run stops (``max_time``), or None."""
    fast_dev_run: int | None = None
    """``fast_dev_run(n)``: one round of n train and n valid batches, nothing kept."""
    limit_batches: tuple[int | None, int | None] | None = None
    """``limit_batches(train=, valid=)``: the batches of each pass, per split (None: all)."""
    overfit_batches: int | None = None
    """``overfit_batches(n)``: train and validate on the items of the first n train batches."""
    keeps_files: bool = True
    """False (``fast_dev_run``): nothing is written in the run directory, not even its lock."""
    stateful: tuple[tuple[str, Stateful], ...] = ()
    gradient_checkpointing: tuple[str, ...] | None = None
    """Dotted submodule names; ``()`` means the model's direct children; None: off."""
    renderer: MetricsRenderer | None = None
    summary: bool = False
    loggers: tuple[MetricLogger, ...] = ()
    application_log: Path | None = None
    strategy: SupervisedLearningStrategy | None = None
    interrupter: Interrupter = field(default_factory=Interrupter)
    early_stopping: EarlyStoppingStrategy | None = None
    checkpointer: RunCheckpointer | Literal["default"] | None = None
    checkpointing_strategy: CheckpointingStrategy | None = None
    resume: Resume = None
    tests: tuple[tuple[str, DataLoader[Any]], ...] = ()
    """Evaluated after training (``with_test``), from the checkpoint ``test_checkpoint``."""
    test_checkpoint: CheckpointEpoch | None = "best"
    module_test: str | None = None
    """``with_test(name)``: the test the data module's ``test_loader()`` gives, at launch."""
    file_logs: bool = True
    """False: no ``FileMetricLogger`` on the directory beside the given loggers."""
    hparams: Mapping[str, Any] = field(default_factory=dict)
    """The user's own entries of the run's configuration (``config.json``)."""
    fresh_if_unusable: bool = False
    """With ``resume="latest"``: train from epoch 1 when every checkpoint is unusable."""
    overwrite: bool = False
    """A fresh run removes what an earlier run wrote in the directory (else it goes to a free
    sibling directory, or is refused with ``exact_directory``)."""
    versioned: bool = False
    """The run goes into ``directory/version_N`` (``_directory.py``)."""
    exact_directory: bool = False
    """A fresh run into a directory holding an earlier run is refused (``RunDirectoryError``)
    instead of going to a free sibling directory ``DIR-N`` (``_directory.py``)."""
    errors_in_result: bool = False
    """A failed training is returned in ``LearningResult.error``, not raised (Burn's way)."""

    @property
    def train_loader(self) -> DataLoader[Any]:
        """The train loader (a data module's, once launch took its loaders)."""
        if self.train is None:
            raise RuntimeError("the data module's loaders are taken when the run launches")
        return self.train

    @property
    def validates(self) -> bool:
        """Whether the run has a valid split: a valid loader, or a data module that gives one."""
        if self.data_module is not None and self.train is None:
            return defines_valid(self.data_module)
        return self.valid is not None


def defines_valid(module: DataModule) -> bool:
    """Whether ``module``'s class gives a valid loader (a run over it validates)."""
    return type(module).valid_loader is not DataModule.valid_loader


def check_hparams(entries: Mapping[str, Any]) -> dict[str, Any]:
    """``entries`` as a dict, refusing a key that is not a string or a value that is not JSON
    (dicts, lists, strings, finite numbers, bools, None), with the key in the message."""
    if not isinstance(entries, Mapping):
        raise TypeError(f"hparams takes a mapping of names to values, got {type(entries).__name__}")
    checked: dict[str, Any] = {}
    for key, value in entries.items():
        if not isinstance(key, str):
            raise TypeError(f"hparams keys must be strings, got {key!r} ({type(key).__name__})")
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"hparams[{key!r}] is not JSON-able ({type(value).__name__}: {error}); give a "
                "string, number, bool, None, or a list or dict of them (e.g. str(value))"
            ) from None
        checked[key] = value
    return checked


def run_configuration(config: TrainingConfig, learner: Learner[Any]) -> dict[str, Any]:
    """The configuration of a run of ``learner`` as ``config`` says (see the module doc)."""
    strategy = config.strategy or SingleDevice()
    metrics = {
        split.value: logged_names(config.metrics, config.valid_sets, split)
        for split in (Split.TRAIN, Split.VALID)
    }
    described: dict[str, Any] = {
        "directory": str(config.directory),
        "ember_version": __version__,
        "torch_version": torch.__version__,
        "num_epochs": config.num_epochs,
        "max_steps": config.max_steps,
        "validate_every": str(config.validate_every),
        "checkpoint_every": None
        if config.checkpoint_every is None
        else str(config.checkpoint_every),
        "grads_accumulation": config.grads_accumulation or 1,
        "mean_accumulation": config.mean_accumulation,
        "precision": config.precision,
        "clipping": _json(config.clipping),
        "compile": _json(config.compile_options),
        "gradient_checkpointing": _json(config.gradient_checkpointing),
        "strategy": type(strategy).__name__,
        "train": _loader(config.train_loader),
        "valid": _valid(config),
        "optimizer": _optimizer(learner.optimizer_or_factory),
        "lr_scheduler": _scheduler(learner.lr_scheduler),
        "metrics": metrics,
        "directions": _directions(config),
        "units": _units(config),
        "resume": config.resume,
        "seed": config.seed,
        "data_module": None if config.data_module is None else _data_module(config),
        "max_time": config.max_time,
        "debugging": _debugging(config),
        "callbacks": [repr(callback) for callback in config.callbacks],
        "hparams": dict(config.hparams),
        "cli": _cli_values(),
    }
    if config.valid_sets:
        described["valid_sets"] = {name: _loader(loader) for name, loader in config.valid_sets}
    return described


def _valid(config: TrainingConfig) -> dict[str, Any] | None:
    """The main valid loader's description, with its name when the sets were named."""
    if config.valid is None:
        return None
    described = _loader(config.valid)
    if config.valid_name is not None:
        described["name"] = config.valid_name
    return described


def _data_module(config: TrainingConfig) -> dict[str, Any]:
    """The data module's class and its plain attributes (what its constructor was given)."""
    module = config.data_module
    plain = {
        key: _json(value)
        for key, value in getattr(module, "__dict__", {}).items()
        if not key.startswith("_")
        and (value is None or isinstance(value, bool | int | float | str))
    }
    return {"class": _qualified(type(module)), "attributes": plain}


def _debugging(config: TrainingConfig) -> dict[str, Any] | None:
    """The debugging modes the run was launched with, or None."""
    modes = {
        "fast_dev_run": config.fast_dev_run,
        "limit_batches": _json(config.limit_batches),
        "overfit_batches": config.overfit_batches,
    }
    return {key: value for key, value in modes.items() if value is not None} or None


def _cli_values() -> dict[str, Any] | None:
    experiment = current_experiment()
    return None if experiment is None else _json(experiment.values)


def _directions(config: TrainingConfig) -> dict[str, str]:
    """Which way is better for each numeric metric, by the name its values are logged under
    (another validation set's too: ``Loss (noisy)``), sorted."""
    named = [(metric.name, metric) for _, metric in config.metrics]
    directions = {
        name: (Direction.HIGHEST if metric.attributes.higher_is_better else Direction.LOWEST)
        for name, metric in [*named, *set_metrics(config.metrics, config.valid_sets)]
        if isinstance(metric, Numeric)
    }
    return {name: directions[name].value for name in sorted(directions)}


def _units(config: TrainingConfig) -> dict[str, str]:
    """The unit of each numeric metric that has one, by name (sorted)."""
    units = {
        metric.name: metric.attributes.unit
        for _, metric in config.metrics
        if isinstance(metric, Numeric)
    }
    return {name: unit for name, unit in sorted(units.items()) if unit}


def _loader(loader: DataLoader[Any]) -> dict[str, Any]:
    items = loader.num_items()  # None: a stream of unknown length
    described: dict[str, Any] = {"batches": None if items is None else len(loader), "items": items}
    state = loader.state_dict()
    for key in ("batch_size", "seed"):  # ember's loaders keep them in their state
        if key in state:
            described[key] = _json(state[key])
    return described


def _optimizer(optim: Any) -> dict[str, Any]:
    if isinstance(optim, dict):  # several optimizers, by name
        return {name: _optimizer(one) for name, one in optim.items()}
    if isinstance(optim, torch.optim.Optimizer):
        groups = [
            {key: _json(value) for key, value in group.items() if key != "params"}
            for group in optim.param_groups
        ]
        return {"class": _qualified(type(optim)), "param_groups": groups}
    if isinstance(optim, functools.partial):  # the usual factory: partial(SGD, lr=...)
        keywords = {key: _json(value) for key, value in optim.keywords.items()}
        return {"class": _qualified(optim.func), "factory_keywords": keywords}
    return {"factory": _json(optim)}


def _scheduler(scheduler: LrScheduler | None) -> dict[str, Any] | None:
    # a scheduler's state is JSON by design (it goes into checkpoints): its hyper-parameters
    if scheduler is None:
        return None  # the optimizer's own lrs
    return {"class": _qualified(type(scheduler)), "state": _json(scheduler.state_dict())}


def _qualified(kind: Any) -> str:
    module = getattr(kind, "__module__", None)
    name = getattr(kind, "__qualname__", None) or repr(kind)
    return f"{module}.{name}" if module else name


def _json(value: Any) -> Any:
    """``value`` as JSON: containers element by element, anything else JSON cannot hold (a
    tensor, a class, NaN) as its ``repr``."""
    if isinstance(value, Mapping):
        return {str(key): _json(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json(item) for item in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return repr(value)
