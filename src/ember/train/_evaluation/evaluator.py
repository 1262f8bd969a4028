"""``EvaluatorBuilder`` and ``Evaluator``: a model scored on test sets (Burn's Evaluator).

::

    evaluator = (EvaluatorBuilder("artifacts/run")
                 .metrics(LossMetric(), AccuracyMetric())
                 .summary()
                 .build(model))
    summary = evaluator.eval_all([("test", test_loader), ("hard", hard_loader)])

One ``eval_all`` (``eval`` is one test)::

    check every name and loader (nothing is run or written before)
    main process: directory, evaluation.log, the renderer, eval-worker (the metrics thread)
    StartEvaluation(n)
    run = strategy.start(model, tests)    # the model placed once, as for training (default:
                                          # where it is); DDP: each rank reads its share, rank
                                          # 0 logs the merged outputs: every item counted once
    for each test:
        StartTest(name, items)
        the inference pass (_inference.py, as validation's): ProcessedItem per output, never
            read back here
        EndTest(name)                     # test/{name}/{Metric}.log complete
    flush; the summary (every process gets rank 0's); test/summary.json if asked
    EndEvaluation(summary) · stop eval-worker · close the renderer; the model's mode restored

An error (a step, a loader, a metric, a write) is raised once everything above is closed.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn
from torch.utils.data import DataLoader as TorchLoader

from ember._checks import check_directory
from ember._errors import DistributedError
from ember._protocols import check_protocol, member, with_defaults
from ember._rundir.checkpoints import check_name
from ember._rundir.summary import write_evaluation_summary
from ember.data import DataLoader
from ember.data._torch_loader import as_ember_loader
from ember.train._application_log import experiment_log
from ember.train._evaluation.processor import FullEventProcessorEvaluation
from ember.train._events import (
    EndEvaluation,
    EndTest,
    EvaluatorEvent,
    ProcessedItem,
    StartEvaluation,
    StartTest,
    TrainingItem,
)
from ember.train._inference import inference_pass
from ember.train._metric.base import Metric, Numeric
from ember.train._metric.registered import MetricsTraining
from ember.train._precision import Precision, autocast_of, check_precision
from ember.train._processor import AsyncProcessorTraining
from ember.train._renderer.base import EvaluationRenderer
from ember.train._renderer.cli import CliMetricsRenderer
from ember.train._step import InferenceStep
from ember.train._strategy.base import (
    Step,
    StrategyDefaults,
    SupervisedLearningStrategy,
    model_device,
    pass_size,
)
from ember.train._strategy.single import SingleDevice
from ember.train._summary import EvaluationSummary
from ember.train._vocabulary import Split

__all__ = ["Evaluator", "EvaluatorBuilder", "EvaluatorConfig", "check_tests"]

Test = tuple[str, DataLoader[Any] | TorchLoader[Any]]
"""A test: its name and its loader (an ember loader, or a ``torch.utils.data.DataLoader``)."""
Checked = tuple[str, DataLoader[Any]]
"""A test checked: its loader an ember loader."""
log = logging.getLogger("ember.train")


@dataclass(frozen=True, slots=True)
class EvaluatorConfig:
    """What an ``EvaluatorBuilder`` was given (see its methods)."""

    directory: Path
    metrics: tuple[tuple[Metric, bool], ...] = ()
    """Each metric, and whether it is summarised (numeric ones registered as such)."""
    renderer: EvaluationRenderer | None = None
    summary: bool = False
    application_log: Path | None = None
    strategy: SupervisedLearningStrategy | None = None
    precision: Precision = "32"


class EvaluatorBuilder:
    """Configures an evaluation writing into ``directory``.

    Defaults (Burn's): the ``CliMetricsRenderer`` on standard output, ``directory/evaluation.log``
    as the application log, no summary table; the model evaluated where its parameters are.
    Every method checks its argument at the call and returns the builder.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        path = check_directory(directory, "where the evaluation writes its logs")
        self._config = EvaluatorConfig(path, application_log=path / "evaluation.log")

    @property
    def config(self) -> EvaluatorConfig:
        """What this builder was given so far (a frozen value)."""
        return self._config

    def _set(self, **changes: Any) -> EvaluatorBuilder:
        self._config = dataclasses.replace(self._config, **changes)
        return self

    def metrics(self, *metrics: Numeric) -> EvaluatorBuilder:
        """Compute each numeric metric on every test; they appear in the summary."""
        for metric in metrics:
            self.metric_numeric(metric)
        return self

    def metric(self, metric: Metric) -> EvaluatorBuilder:
        """Compute ``metric`` on every test (logged and rendered, not summarised)."""
        return self._register(metric, summarised=False)

    def metric_numeric(self, metric: Numeric) -> EvaluatorBuilder:
        """Compute a numeric ``metric`` on every test; it appears in the summary."""
        return self._register(metric, summarised=True)

    def _register(self, metric: Metric, *, summarised: bool) -> EvaluatorBuilder:
        check_protocol(metric, Metric, "metric")
        if summarised and not isinstance(metric, Numeric):
            raise TypeError(
                f"{type(metric).__name__} is not a numeric metric (it needs attributes, value, "
                "running_value and final_value); register it with metric()"
            )
        if any(m.name == metric.name for m, _ in self._config.metrics):
            raise ValueError(
                f"a metric named {metric.name!r} is already registered; each metric writes to "
                "the file of its name, so names must be unique"
            )
        return self._set(metrics=(*self._config.metrics, (metric, summarised)))

    def renderer(self, renderer: EvaluationRenderer) -> EvaluatorBuilder:
        """Show the evaluation with ``renderer``."""
        check_protocol(renderer, EvaluationRenderer, "renderer")
        return self._set(renderer=renderer)

    def summary(self) -> EvaluatorBuilder:
        """Print the summary table at the end and write ``directory/test/summary.json``."""
        return self._set(summary=True)

    def with_application_logger(self, path: str | os.PathLike[str] | None) -> EvaluatorBuilder:
        """Write the application log to ``path``, or nowhere with None."""
        return self._set(application_log=None if path is None else Path(path))

    def precision(self, precision: Precision) -> EvaluatorBuilder:
        """Run ``inference_step`` under autocast, as training with this precision did."""
        return self._set(precision=check_precision(precision))

    def with_strategy(self, strategy: SupervisedLearningStrategy) -> EvaluatorBuilder:
        """Place the model and read the tests as ``strategy`` does for validation (e.g.
        ``DistributedDataParallel()``: every rank runs ``eval``, each item is counted once)."""
        strategy = with_defaults(strategy, SupervisedLearningStrategy, "strategy")
        return self._set(strategy=strategy)

    def build(self, model: nn.Module, *, step: Step | None = None) -> Evaluator:
        """An :class:`Evaluator` of ``model``, running its ``inference_step`` on each batch, or
        ``step`` (``learner.inference_step`` for a plain model trained with a loss);
        ValueError without a metric."""
        if not self._config.metrics:
            raise ValueError(
                "an evaluator needs at least one metric: call metrics(...), metric_numeric(...) "
                "or metric(...) before build()"
            )
        return Evaluator(self._config, model, step)


class Evaluator:
    """Runs tests on a model and returns their :class:`EvaluationSummary` (see module doc)."""

    def __init__(self, config: EvaluatorConfig, model: nn.Module, step: Step | None = None) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if step is not None and not callable(step):
            raise TypeError(f"step must be callable with a batch, got {type(step).__name__}")
        if step is None and not isinstance(model, InferenceStep):
            raise TypeError(
                f"model {type(model).__name__} has no inference_step(batch) method: pass "
                "step=learner.inference_step (a plain model's, built from the Learner's loss "
                "and task), or give the model one"
            )
        self._config = config
        self._model = model
        self._step = step
        self._evaluated = EvaluationSummary()

    @property
    def model(self) -> nn.Module:
        """The model evaluated."""
        return self._model

    def eval(self, name: str, loader: DataLoader[Any] | TorchLoader[Any]) -> EvaluationSummary:
        """Evaluate the test ``name`` over ``loader``; see :meth:`eval_all`."""
        return self.eval_all([(name, loader)])

    def eval_all(self, tests: Sequence[Test]) -> EvaluationSummary:
        """Evaluate each ``(name, loader)`` in order and return their values.

        ``name`` is a directory name (``test/{name}/``): no path separator, unique here. A loader
        must hold at least one item. The summary written (``summary()``) holds every test this
        evaluator ran so far, the latest values of a name replacing older ones.
        """
        tests = check_tests(tests)
        config = self._config
        strategy = config.strategy or SingleDevice()
        main = strategy.is_main
        if main:
            config.directory.mkdir(parents=True, exist_ok=True)
        with experiment_log(config.application_log if main else None):
            renderer = config.renderer or CliMetricsRenderer()
            full = (
                FullEventProcessorEvaluation(self._metrics(), renderer, config.directory)
                if main
                else None
            )
            processor = AsyncProcessorTraining(full, name="eval-worker") if full else None
            emit: Callable[[EvaluatorEvent], None] = (
                processor.process_test if processor is not None else _drop
            )
            summary: EvaluationSummary | None = None
            error: BaseException | None = None
            training = self._model.training
            try:
                emit(StartEvaluation(len(tests)))
                summary = self._run(strategy, tests, emit, processor, full)
                if config.summary and main:
                    self._evaluated = self._evaluated.merged(summary)
                    write_evaluation_summary(config.directory, self._evaluated.dumps())
            except BaseException as caught:  # raised once everything is closed
                error = caught
            finally:
                self._model.train(training)
                if processor is not None:
                    emit(EndEvaluation(summary if config.summary and error is None else None))
                    processor.close()
                    error = error or processor.error
                    if error is not None:
                        renderer.on_error(error)
                    renderer.close()
        if error is not None:
            raise error
        assert summary is not None
        return summary

    def _metrics(self) -> MetricsTraining:
        metrics = MetricsTraining()
        for metric, _ in self._config.metrics:
            metrics.register(Split.TEST, copy.deepcopy(metric))  # fresh state per evaluation
        return metrics

    def _run(
        self,
        strategy: SupervisedLearningStrategy,
        tests: Sequence[Checked],
        emit: Callable[[EvaluatorEvent], None],
        processor: AsyncProcessorTraining | None,
        full: FullEventProcessorEvaluation | None,
    ) -> EvaluationSummary:
        """Run every test on the model placed once; the main process's summarised values, on
        every process."""
        model = self._model
        member(strategy, StrategyDefaults, "use_precision")(self._config.precision)
        run = strategy.start(model, {_key(name): loader for name, loader in tests})
        rows: list[dict[str, Any]] = []
        try:
            autocast = autocast_of(self._config.precision, model_device(model))
            for name, loader in tests:
                size, batches = pass_size(loader)
                run.check_same({"the test loader's items": size, "its batches": batches})
                log.info("Evaluating test %r over %s items", name, loader.num_items())
                emit(StartTest(name, loader.num_items()))
                outputs = inference_pass(
                    run, _key(name), autocast=autocast, step=self._step, split=name
                )
                for iteration, (item, progress, values) in enumerate(outputs, 1):
                    done = TrainingItem(item, progress, iteration, None, values=values)
                    emit(ProcessedItem(done))
                emit(EndTest(name))
                decided = run.decide(self._values(processor, full))
                if decided is None:  # the metrics thread failed; every process stops here
                    failure = processor.error if processor is not None else None
                    raise failure or DistributedError("the evaluation failed on the main process")
                rows = decided
        except BaseException as error:
            run.close(error)
            raise
        run.close()
        return EvaluationSummary.from_json({"tests": rows})

    def _values(
        self, processor: AsyncProcessorTraining | None, full: FullEventProcessorEvaluation | None
    ) -> list[dict[str, Any]] | None:
        """The summarised values of the tests run so far as JSON rows (after a flush), None if
        the metrics thread failed; [] on processes that do not log."""
        if processor is None or full is None:
            return []
        processor.flush()
        if processor.error is not None:
            return None
        summarised = [metric for metric, summarised in self._config.metrics if summarised]
        names = {metric.name for metric in summarised}
        values = {
            test: {name: value for name, value in metrics.items() if name in names}
            for test, metrics in full.values.items()
        }
        units = {m.name: m.attributes.unit for m in summarised if isinstance(m, Numeric)}
        summary = EvaluationSummary.from_values(values, units)
        rows: list[dict[str, Any]] = summary.to_json()["tests"]
        return rows


def _key(name: str) -> str:
    """The loader of test ``name`` as placed by the strategy: apart from the training roles
    (``MultiDevice`` slices a loader named ``train``)."""
    return f"test:{name}"


def _drop(event: EvaluatorEvent) -> None:
    """An event on a process that neither logs nor renders (DDP ranks other than 0)."""


def check_test_name(name: object) -> str:
    """``name`` if it can name a test: a plain directory name (``test/{name}/`` holds its
    logs); TypeError or ValueError naming it otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"test name must be a str, got {name!r}")
    try:
        check_name(name)
    except ValueError:
        raise ValueError(
            f"test name {name!r} must be a plain directory name (test/{{name}}/ holds its "
            "logs): not empty, not '.' or '..', without a path separator"
        ) from None
    return name


def check_tests(tests: Sequence[Test]) -> list[Checked]:
    """``tests`` as a list, each name a plain directory name, unique, each loader non-empty."""
    if isinstance(tests, str | bytes) or not isinstance(tests, Sequence):
        raise TypeError(f"tests must be a sequence of (name, loader) pairs, got {tests!r}")
    if not tests:
        raise ValueError("tests is empty: give at least one (name, loader) pair")
    checked: list[Checked] = []
    for index, test in enumerate(tests):
        if not isinstance(test, tuple) or len(test) != 2:
            raise TypeError(f"tests[{index}] must be a (name, loader) pair, got {test!r}")
        name, loader = test
        check_test_name(name)
        if any(name == other for other, _ in checked):
            raise ValueError(f"test name {name!r} is given twice; each test needs its own name")
        loader = as_ember_loader(loader, f"loader of test {name!r}")
        if loader.num_items() == 0:
            raise ValueError(f"the loader of test {name!r} is empty: it holds no item to evaluate")
        checked.append((name, loader))
    return checked
