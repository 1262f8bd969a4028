"""``SupervisedTraining``: the builder that configures a run and launches it.

::

    result = (SupervisedTraining("artifacts/run", train_loader, valid_loader)
              .metric_train_numeric(LossMetric()).metric_valid_numeric(LossMetric())
              .num_epochs(3).summary()
              .launch(Learner(model, optimizer, 1e-2)))

Every method validates its argument at the call, raising ``TypeError``/``ValueError`` that names
the argument, the value and what is expected, and returns the builder; the values go into a
frozen :class:`~ember.train._config.TrainingConfig` that ``launch`` reads (``_training.py``).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from torch import nn
from torch.utils.data import DataLoader as TorchLoader

from ember._checks import check_directory, check_positive_int, check_real
from ember._protocols import check_protocol, with_defaults
from ember._rundir.metric_logs import metric_file_name
from ember.data import DataLoader, DataModule
from ember.data._torch_loader import as_ember_loader
from ember.train._callbacks.base import Callback
from ember.train._callbacks.called import check_callback
from ember.train._callbacks.time_limit import TimeLimit
from ember.train._checkpoint.checkpointer import RunCheckpointer
from ember.train._checkpoint.export import CheckpointEpoch, check_checkpoint_epoch
from ember.train._checkpoint.strategy import CheckpointingStrategy
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig, check_hparams
from ember.train._early_stopping import EarlyStoppingStrategy
from ember.train._evaluation.evaluator import check_test_name, check_tests
from ember.train._gradient_checkpointing import check_module_names
from ember.train._hooks import HOOKS, Stateful, TrainingHooks, has_hooks
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._logger.base import MetricLogger
from ember.train._metric.base import Metric, NamedMetric, Numeric
from ember.train._metric.registered import set_metric_name
from ember.train._options import TrainingOptions, option_calls
from ember.train._precision import Precision, check_precision
from ember.train._renderer.base import MetricsRenderer
from ember.train._result import LearningResult
from ember.train._schedule import Unit, every
from ember.train._strategy.base import SupervisedLearningStrategy
from ember.train._threshold import ThresholdStop
from ember.train._training import launch
from ember.train._valid_sets import logged_names, valid_loaders
from ember.train._vocabulary import Split

__all__ = ["SupervisedTraining"]

M = TypeVar("M", bound=nn.Module)


class SupervisedTraining:
    """Configures a supervised training run over ``train`` and ``valid`` in ``directory``.

    ``train`` and ``valid`` are ember loaders or ``torch.utils.data.DataLoader`` objects (each
    adapted by ``TorchDataLoader``). Without ``valid`` the run trains only: no valid split,
    no valid metrics, and what reads a validation value (early stopping or checkpointing on a
    valid metric, ``ReduceLROnPlateau``, ``with_test``) is refused at launch. ``valid`` may
    also be several named validation sets, ``{"clean": a, "noisy": b}``: the first is the main
    one (its values keep their names, ``Loss``), each other's values are named after it
    (``Loss (noisy)``; ``docs/training.md``, "Several validation sets").

    Defaults (Burn's): 1 epoch; ``directory/experiment.log`` application log; metrics logged to
    files under ``directory`` (and to the loggers given); the renderer picked by
    ``default_renderer``; the device of the model's first parameter.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        train: DataLoader[Any] | TorchLoader[Any] | DataModule,
        valid: (
            DataLoader[Any]
            | TorchLoader[Any]
            | Mapping[str, DataLoader[Any] | TorchLoader[Any]]
            | None
        ) = None,
    ) -> None:
        path = check_directory(directory, "the run directory")
        log = path / "experiment.log"
        if isinstance(train, DataModule):
            if valid is not None:
                raise TypeError(
                    f"{type(train).__name__} is a data module: it gives the valid loader itself "
                    "(valid_loader()); drop the valid argument, or pass two loaders"
                )
            self._config = TrainingConfig(path, None, None, data_module=train, application_log=log)
            return
        train = as_ember_loader(train, "the train loader")
        main, name, sets = valid_loaders(valid)
        self._config = TrainingConfig(path, train, main, name, sets, application_log=log)

    @property
    def config(self) -> TrainingConfig:
        """What this builder was given so far (a frozen value)."""
        return self._config

    @property
    def directory(self) -> Path:
        """The run directory."""
        return self._config.directory

    def _set(self, **changes: Any) -> SupervisedTraining:
        self._config = dataclasses.replace(self._config, **changes)
        return self

    # metrics -----------------------------------------------------------------------------

    def metric_train(self, metric: Metric) -> SupervisedTraining:
        """Compute ``metric`` on the training split (logged, not summarised)."""
        return self._register(Split.TRAIN, metric, summarised=False)

    def metric_valid(self, metric: Metric) -> SupervisedTraining:
        """Compute ``metric`` on the validation split (logged, not summarised)."""
        return self._register(Split.VALID, metric, summarised=False)

    def metric_train_numeric(self, metric: Numeric) -> SupervisedTraining:
        """Compute a numeric ``metric`` on the training split; it appears in the summary."""
        return self._register(Split.TRAIN, metric, summarised=True)

    def metric_valid_numeric(self, metric: Numeric) -> SupervisedTraining:
        """Compute a numeric ``metric`` on the validation split; it appears in the summary."""
        return self._register(Split.VALID, metric, summarised=True)

    def metrics(self, *metrics: Numeric) -> SupervisedTraining:
        """Compute each numeric metric on both splits (the training split only when training
        only)."""
        for metric in metrics:
            self.metric_train_numeric(metric)
            if self._config.validates:
                self.metric_valid_numeric(metric)
        return self

    def _register(self, split: Split, metric: Metric, *, summarised: bool) -> SupervisedTraining:
        check_protocol(metric, Metric, "metric")
        if split is Split.VALID and not self._config.validates:
            raise ValueError(
                f"{type(metric).__name__} is registered on the valid split, and this run has "
                "no valid loader (SupervisedTraining(directory, train) trains only): give one, "
                "SupervisedTraining(directory, train, valid), or register it with "
                "metric_train_numeric/metric_train"
            )
        if summarised and not isinstance(metric, Numeric):
            raise TypeError(
                f"{type(metric).__name__} is not a numeric metric (it needs attributes, value, "
                "running_value and final_value); register it with metric_train/metric_valid"
            )
        self._check_names(split, metric)
        config = self._config
        names = config.summary_metrics | {metric.name} if summarised else config.summary_metrics
        return self._set(metrics=(*config.metrics, (split, metric)), summary_metrics=names)

    def _check_names(self, split: Split, metric: Metric) -> None:
        """The names ``metric``'s values are logged under (on the valid split, also each other
        validation set's: ``Loss (noisy)``) name files: refused here, not mid-run, when empty,
        too long for a file name or taken on ``split``."""
        config = self._config
        names = [metric.name]
        if split is Split.VALID:
            names += [set_metric_name(metric.name, name) for name, _ in config.valid_sets]
        for name in names:
            try:
                metric_file_name(name)
            except ValueError as error:
                raise ValueError(f"{type(metric).__name__} cannot be registered: {error}") from None
        if any(s is split and m.name == metric.name for s, m in config.metrics):
            raise ValueError(
                f"a metric named {metric.name!r} is already registered for the {split.value} "
                "split; each metric writes to the file of its name, so names must be unique"
            )
        taken = logged_names(config.metrics, config.valid_sets, split)
        for name in names:
            if name in taken:
                raise ValueError(
                    f"{type(metric).__name__}'s values would be logged as {name!r} on the "
                    f"{split.value} split, where that name is already logged (its values: "
                    f"{taken}; another validation set's are '{{metric}} ({{set}})'): each name "
                    "writes to the file of its name, so rename the metric"
                )

    # loop --------------------------------------------------------------------------------

    def num_epochs(self, num_epochs: int) -> SupervisedTraining:
        """Train until epoch ``num_epochs`` (absolute, also when resuming)."""
        return self._set(num_epochs=check_positive_int("num_epochs", num_epochs), epochs_given=True)

    def max_steps(self, n: int) -> SupervisedTraining:
        """End the run after ``n`` optimizer steps (absolute, also when resuming); with
        ``num_epochs(...)`` called too, the first reached ends it (``docs/training.md``)."""
        return self._set(max_steps=check_positive_int("max_steps", n))

    def validate_every(
        self, *, steps: int | None = None, epochs: int | None = None
    ) -> SupervisedTraining:
        """Validate (over the whole valid loader) every ``steps`` optimizer steps or every
        ``epochs`` epochs; default: every epoch (``docs/training.md``, step-granular)."""
        return self._set(
            validate_every=every("validate_every", ("steps", "epochs"), steps=steps, epochs=epochs)
        )

    def checkpoint_every(
        self, *, steps: int | None = None, seconds: float | None = None, epochs: int | None = None
    ) -> SupervisedTraining:
        """Checkpoint at the first validation at or after every ``steps`` optimizer steps,
        ``seconds`` seconds or ``epochs`` epochs, and at the run's end; default: every one."""
        units: tuple[Unit, ...] = ("steps", "seconds", "epochs")
        interval = every("checkpoint_every", units, steps=steps, seconds=seconds, epochs=epochs)
        return self._set(checkpoint_every=interval)

    def grads_accumulation(self, n: int, mean: bool = False) -> SupervisedTraining:
        """One optimizer step per ``n`` batches. ``mean=False`` (the seed's rule) sums their
        gradients: like an n times larger batch with an n times larger lr. ``mean=True``
        weights each batch by its items, so n batches of b items equal one batch of n·b
        items (a loss that averages over its batch), the short last window included."""
        if not isinstance(mean, bool):
            raise TypeError(f"mean must be a bool, got {mean!r}")
        n = check_positive_int("grads_accumulation", n)
        return self._set(grads_accumulation=n, mean_accumulation=mean)

    def precision(self, precision: Precision) -> SupervisedTraining:
        """Train and validate in ``"32"`` (default), ``"bf16-mixed"`` or ``"16-mixed"``
        (autocast; 16-mixed also scales the loss with ``torch.amp.GradScaler``)."""
        return self._set(precision=check_precision(precision))

    def clip_grad_norm(self, max_norm: float, norm_type: float = 2.0) -> SupervisedTraining:
        """Clip the total gradient norm of every optimizer step to ``max_norm``, as
        ``torch.nn.utils.clip_grad_norm_`` (after accumulation and unscaling); ``norm_type`` is
        a p > 0 or ``float("inf")`` (the largest absolute gradient), as torch takes it."""
        limit = check_real("max_norm", max_norm, minimum=0.0, strict=True)
        if isinstance(norm_type, numbers.Real) and norm_type == math.inf:
            kind = math.inf
        else:
            kind = check_real("norm_type", norm_type, minimum=0.0, strict=True)
        return self._set(clipping=("norm", limit, kind))

    def clip_grad_value(self, clip_value: float) -> SupervisedTraining:
        """Clamp every gradient element of every optimizer step to ``[-clip_value,
        clip_value]``, as ``torch.nn.utils.clip_grad_value_``."""
        limit = check_real("clip_value", clip_value, minimum=0.0, strict=True)
        return self._set(clipping=("value", limit, 0.0))

    def compile(self, **options: Any) -> SupervisedTraining:
        """Compile the model in place with ``nn.Module.compile(**options)`` at launch, so the
        ``self(...)`` calls inside ``train_step`` and ``inference_step`` run compiled.
        Options ``torch.compile`` does not take are refused here, naming them."""
        import inspect

        import torch

        accepted = set(inspect.signature(torch.compile).parameters) - {"model"}
        unknown = sorted(set(options) - accepted)
        if unknown:
            raise TypeError(
                f"compile() got options torch.compile does not take: {unknown}; it takes "
                f"{sorted(accepted)}"
            )
        return self._set(compile_options=dict(options))

    def gradient_checkpointing(self, modules: Sequence[str] | None = None) -> SupervisedTraining:
        """Recompute activations in the backward pass instead of keeping them (less memory,
        one more forward per step): those of the model's direct children, or of the submodules
        named by dotted name (checked against the model at launch). See
        ``docs/strategies.md``."""
        names = () if modules is None else check_module_names(modules)
        return self._set(gradient_checkpointing=names)

    def with_hooks(self, hooks: TrainingHooks | object) -> SupervisedTraining:
        """Call ``hooks`` at every epoch and split start and end: each of the four hooks
        (``on_epoch_start``, ``on_split_start``, ``on_split_end``, ``on_epoch_end``) it has; one
        it lacks is skipped. A model with any of them is called without this. Subclass ``Hooks``
        for a class that names them all."""
        if not has_hooks(hooks):
            raise TypeError(
                f"with_hooks: {type(hooks).__name__} has none of the hooks "
                f"({', '.join(HOOKS)}); define at least one of them (subclass ember.train.Hooks)"
            )
        return self._set(hooks=(*self._config.hooks, hooks))

    def seed(self, seed: int) -> SupervisedTraining:
        """Seed torch (every device), numpy and Python's ``random`` with ``seed`` when the run
        launches, on every process, before anything random the run does (a data module's
        ``setup`` included); ``config.json`` records it, so the run can be trained again."""
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
        return self._set(seed=seed)

    def with_options(self, options: TrainingOptions) -> SupervisedTraining:
        """Apply ``options`` (a config file's trainer section, ``TrainingOptions``): each field
        that differs from its default calls the builder method it is named after."""
        builder = self
        for method, args, keywords in option_calls(options):
            builder = getattr(builder, method)(*args, **keywords)
        return builder

    def with_callbacks(self, *callbacks: Callback | object) -> SupervisedTraining:
        """Call each of ``callbacks`` at every point of the loop it has a method for (subclass
        ``Callback``: ``on_run_start``, ``on_train_batch_end``, ``on_after_optimizer_step``,
        ``on_validation_end``, …; ``docs/callbacks.md``), in the order given. A callback with
        ``state_dict()``/``load_state_dict()`` joins every checkpoint and is restored on
        resume."""
        for callback in callbacks:
            check_callback(callback)
        return self._set(callbacks=(*self._config.callbacks, *callbacks))

    def max_time(self, seconds: float) -> SupervisedTraining:
        """Stop after the first optimizer step (or round end) past ``seconds`` of training in
        this launch, as a stop does: a mid-round checkpoint there when the run takes them,
        ``result.stop_reason`` naming the budget; a resumed launch gets the budget anew."""
        return self._set(max_time=TimeLimit(seconds).seconds)

    # debugging ---------------------------------------------------------------------------

    def fast_dev_run(self, n: int = 1) -> SupervisedTraining:
        """Check the whole run in seconds: one round of ``n`` train batches and ``n`` valid
        batches through every metric, callback and the renderer, and nothing kept (no
        checkpoint, log file, tracker run or lock: the run directory is not touched)."""
        return self._set(fast_dev_run=check_positive_int("fast_dev_run", n))

    def limit_batches(
        self, *, train: int | None = None, valid: int | None = None
    ) -> SupervisedTraining:
        """Train on the first ``train`` batches of each train pass and validate on the first
        ``valid`` batches of the valid loader (None: all), as Lightning's
        ``limit_train_batches``/``limit_val_batches``."""
        if train is None and valid is None:
            raise ValueError("limit_batches needs train=N, valid=N or both")
        limits = (
            None if train is None else check_positive_int("limit_batches(train=...)", train),
            None if valid is None else check_positive_int("limit_batches(valid=...)", valid),
        )
        return self._set(limit_batches=limits)

    def overfit_batches(self, n: int) -> SupervisedTraining:
        """Train and validate on the items of the train loader's first ``n`` batches, every
        round: a model that cannot overfit them has a bug."""
        return self._set(overfit_batches=check_positive_int("overfit_batches", n))

    def with_stateful(self, name: str, state: Stateful) -> SupervisedTraining:
        """Keep ``state`` (``state_dict``/``load_state_dict``: a counter, an EMA of the weights)
        in every checkpoint under ``name``, restored on resume."""
        check_protocol(state, Stateful, "state")
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        if any(name == known for known, _ in self._config.stateful):
            raise ValueError(f"a state named {name!r} is already kept; names must be unique")
        return self._set(stateful=(*self._config.stateful, (name, state)))

    def with_training_strategy(self, strategy: SupervisedLearningStrategy) -> SupervisedTraining:
        """Run the epochs with ``strategy`` (default: ``SingleDevice``)."""
        return self._set(strategy=with_defaults(strategy, SupervisedLearningStrategy, "strategy"))

    def early_stopping(self, strategy: EarlyStoppingStrategy) -> SupervisedTraining:
        """Ask ``strategy`` after every epoch whether to stop."""
        return self._set(
            early_stopping=with_defaults(strategy, EarlyStoppingStrategy, "early stopping")
        )

    def stop_when(
        self, metric: str | NamedMetric, threshold: float, *, split: Split | str = Split.TRAIN
    ) -> SupervisedTraining:
        """Stop once ``metric`` reaches ``threshold``: a train batch's value (each validation
        epoch's value with ``split="valid"``), at or below it where lower is better (``Loss``),
        at or above it where higher is better (``Accuracy``). The run stops after the batch
        (the round) whose value reached it, the same one in every run: the loop waits for the
        metrics after every train batch (a host sync per step). The optimizer window under way
        finishes, a mid-round checkpoint is taken (when the run takes them),
        ``result.stop_reason`` names the value, and ``resume_latest()`` goes on from there.
        The metric must be registered on the split (refused at launch otherwise)."""
        return self.with_metric_logger(ThresholdStop(metric, threshold, split))

    def with_interrupter(self, interrupter: Interrupter) -> SupervisedTraining:
        """Use ``interrupter`` to stop training from elsewhere."""
        if not isinstance(interrupter, Interrupter):
            raise TypeError(f"expected an Interrupter, got {type(interrupter).__name__}")
        return self._set(interrupter=interrupter)

    def interrupter(self) -> Interrupter:
        """The handle that stops this run (``stop(reason)``)."""
        return self._config.interrupter

    # checkpoints -------------------------------------------------------------------------

    def with_default_checkpointers(self) -> SupervisedTraining:
        """Checkpoint into ``directory/checkpoint`` (model, optim, scheduler and ember's state
        as safetensors, plus a manifest), written on a background thread, as the checkpointing
        strategy decides."""
        return self._set(checkpointer=DEFAULT_CHECKPOINTERS)

    def with_checkpointers(self, checkpointer: RunCheckpointer) -> SupervisedTraining:
        """Checkpoint through ``checkpointer`` (e.g. a ``LearningCheckpointer`` with its own
        directory, strategy and sync mode)."""
        check_protocol(checkpointer, RunCheckpointer, "checkpointer")
        return self._set(checkpointer=checkpointer)

    def with_checkpointing_strategy(self, strategy: CheckpointingStrategy) -> SupervisedTraining:
        """Decide with ``strategy`` which epochs the default checkpointers keep (default: the
        last 2 and the best mean valid Loss)."""
        check_protocol(strategy, CheckpointingStrategy, "checkpointing strategy")
        return self._set(checkpointing_strategy=strategy)

    def checkpoint(self, epoch: int) -> SupervisedTraining:
        """Resume from the checkpoint of ``epoch``: training starts at ``epoch + 1``."""
        return self._set(resume=check_positive_int("epoch", epoch))

    def resume_latest(self, *, fresh_if_unusable: bool = False) -> SupervisedTraining:
        """Resume from the newest complete checkpoint, or start afresh if there is none.

        Newer checkpoints that are damaged or incomplete are skipped with a warning naming each
        file and what is wrong (the resumed run writes those epochs again). When checkpoints
        exist but none is usable, ``launch`` refuses to start (CheckpointError listing them)
        unless ``fresh_if_unusable`` is True: then training starts at epoch 1, with a warning,
        and overwrites them.
        """
        if not isinstance(fresh_if_unusable, bool):
            raise TypeError(
                f"fresh_if_unusable must be a bool, got {fresh_if_unusable!r} "
                f"({type(fresh_if_unusable).__name__})"
            )
        return self._set(resume="latest", fresh_if_unusable=fresh_if_unusable)

    def versioned(self) -> SupervisedTraining:
        """Launch into a new ``directory/version_N`` each time (N one more than the highest
        there, from 0; two launches at once take two versions), Lightning's layout; with
        ``resume_latest()``, into the newest version. The run says which on the screen, and
        ``LearningResult.directory``."""
        return self._set(versioned=True)

    def overwrite(self) -> SupervisedTraining:
        """Start afresh in a directory that holds an earlier run: remove what ember wrote there
        (its metric logs, checkpoints, ``experiment.log``, ``config.json``, ``summary.json``;
        never other files, also inside ``train/``) at launch. Without it, such a fresh run goes
        to the first free sibling directory (``DIR-2``, ``DIR-3``, ...), leaving the earlier run
        as it is."""
        return self._set(overwrite=True)

    def exact_directory(self) -> SupervisedTraining:
        """Train in the directory given or not at all: a fresh run into a directory that holds
        an earlier run is refused (``RunDirectoryError``, naming what is there and the choices)
        instead of going to a free sibling directory ``DIR-N``. For a pipeline whose next step
        reads that directory."""
        return self._set(exact_directory=True)

    # output ------------------------------------------------------------------------------

    def renderer(self, renderer: MetricsRenderer) -> SupervisedTraining:
        """Show training with ``renderer``."""
        check_protocol(renderer, MetricsRenderer, "renderer")
        return self._set(renderer=renderer)

    def summary(self) -> SupervisedTraining:
        """Print the summary table at the end and write ``summary.json``."""
        return self._set(summary=True)

    def with_metric_logger(self, logger: MetricLogger) -> SupervisedTraining:
        """Also log metrics (and the configuration, summary and artifacts) to ``logger``; the
        file logs under the directory stay, unless ``without_file_logs()``."""
        check_protocol(logger, MetricLogger, "metric logger")
        return self._set(loggers=(*self._config.loggers, logger))

    def without_file_logs(self) -> SupervisedTraining:
        """Write no metric files under the directory: only the given loggers get the values.

        The summary, early stopping and metric-based checkpointing read values back; with them,
        a given logger must read back (e.g. ``InMemoryMetricLogger``, ``CsvMetricLogger``), or
        launch refuses the run before training."""
        return self._set(file_logs=False)

    def hparams(self, entries: Mapping[str, Any]) -> SupervisedTraining:
        """Add the user's own entries to the run's configuration (``config.json``, and what
        trackers record as parameters); values must be JSON-able, checked here."""
        return self._set(hparams={**self._config.hparams, **check_hparams(entries)})

    def with_application_logger(self, path: str | os.PathLike[str] | None) -> SupervisedTraining:
        """Write the application log to ``path``, or nowhere with None."""
        return self._set(application_log=None if path is None else Path(path))

    def with_test(
        self,
        name: str,
        loader: DataLoader[Any] | TorchLoader[Any] | None = None,
        *,
        checkpoint: CheckpointEpoch | None = "best",
    ) -> SupervisedTraining:
        """After training, evaluate the test ``name`` over ``loader`` with the valid split's
        metrics, from the weights of ``checkpoint`` (``"best"``: the epoch the checkpointing
        strategy keeps for its metric; ``"last"``; an epoch; None: the model as trained).
        Without ``loader``, the run's data module's ``test_loader()`` (taken at launch).

        The values are in ``LearningResult.evaluation``, the logs in ``directory/test/{name}/``
        and, with ``summary()``, the table is printed and written to ``test/summary.json``. A
        failed evaluation is the result's ``error``. Every test of a run uses one checkpoint.
        """
        checkpoint = check_checkpoint_epoch(checkpoint)
        config = self._config
        if config.tests and checkpoint != config.test_checkpoint:
            raise ValueError(
                f"every test of a run is evaluated from one checkpoint; the earlier tests use "
                f"{config.test_checkpoint!r}, this one asks for {checkpoint!r}"
            )
        if loader is None:
            return self._set(module_test=_module_test(config, name), test_checkpoint=checkpoint)
        tests = check_tests(
            [*config.tests, (name, as_ember_loader(loader, f"loader of test {name!r}"))]
        )
        return self._set(tests=tuple(tests), test_checkpoint=checkpoint)

    def errors_in_result(self) -> SupervisedTraining:
        """Return a failed training's error in ``LearningResult.error`` (Burn's behaviour)
        instead of raising ``TrainingError`` from it; check ``result.succeeded`` then."""
        return self._set(errors_in_result=True)

    # launch ------------------------------------------------------------------------------

    def launch(self, learner: Learner[M]) -> LearningResult[M]:
        """Train ``learner`` as configured; see ``_training.launch`` for what happens, in order.

        A failed training raises ``TrainingError`` (its ``.result`` is the run's result) once the
        run is finished, unless ``errors_in_result()``."""
        return launch(self._config, learner)


def _module_test(config: TrainingConfig, name: str) -> str:
    """The name of the test a data module's ``test_loader()`` gives (``with_test(name)``)."""
    module = config.data_module
    if module is None or type(module).test_loader is DataModule.test_loader:
        raise ValueError(
            f"with_test({name!r}) without a loader evaluates the data module's test_loader(), "
            "and this run has no data module that gives one: pass the loader, "
            f"with_test({name!r}, loader), or override test_loader() in the data module"
        )
    if config.module_test is not None:
        raise ValueError(
            f"the data module's test loader is evaluated once, as {config.module_test!r}: give "
            "the other tests their loaders"
        )
    return check_test_name(name)
