"""What a training strategy supplies to the loop: where the model runs, how gradients combine.

The loop (``train/_loop.py``) is the same for every strategy, and so is the inference pass of
validation, the Evaluator and ``predict`` (``train/_inference.py``). A strategy
(:class:`SupervisedLearningStrategy`) says whether this process is the main one and, when a run
starts, places the model and the loaders and returns a :class:`StrategyRun`, which the loop then
asks for each batch::

    run = strategy.start(model, {"train": t, "valid": v})   # the model moved, replicated or
                                                          # sharded; each loader placed (its
                                                          # device, this rank's share)
    learner.bind()                                        # a training run: the optimizers on
                                                          # the placed parameters
    for unit, progress in run.train_pass():               # a unit of work: one batch, a batch
        outputs = run.train_step(learner, unit)           # per device, or this rank's share;
                                                          # forward + backward, the gradients
                                                          # combined into the main model's .grad
        (optimizer step)  run.after_optimizer_step()      # e.g. copy the weights to the replicas
        items, stopper = run.report(items, wish)          # what the main process logs; the lowest
                                                          # rank that wants to stop, or None
    for batch, progress in run.valid_pass("valid"): run.inference_step(batch) ...
    run.decide(value) · run.gather(value) · run.check_same(facts)   # decisions across processes
    run.close(error)                                      # error: what ended the run, if any

An evaluation places the model without a Learner (``strategy.start(model, {name: loader, ...})``)
and runs ``valid_pass(name)`` for each test. :class:`LocalRun` implements the members that are
the same for every single-process strategy (one process decides alone); ember's strategies and
``examples/custom_strategy.py`` build on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, cast, runtime_checkable

import torch
from torch import nn

from ember.data import DataLoader, Progress
from ember.train._learner import Learner
from ember.train._precision import Precision
from ember.train._step import GradientsParams, InferenceStep, TrainOutput, trained_parameters

__all__ = [
    "LocalRun",
    "StrategyDefaults",
    "StrategyRun",
    "SupervisedLearningStrategy",
    "add_gradients",
    "model_device",
    "pass_size",
    "with_progress",
]

T = TypeVar("T")

Step = Callable[[Any], Any]
"""What runs on one inference batch: the model's ``inference_step``, or ``predict``'s ``step``."""


@runtime_checkable
class StrategyRun(Protocol):
    """One run of a strategy: the placed model and loaders, and how each batch is run."""

    @property
    def replicas(self) -> Sequence[nn.Module]:
        """Every copy of the model this process trains (the main model first); gradient
        checkpointing is applied to each."""
        ...

    @property
    def loaders(self) -> Mapping[str, DataLoader[Any]]:
        """The placed loaders whose positions a checkpoint keeps, by their key there
        (``train``, ``valid``, ``train-device-1``, …)."""
        ...

    @property
    def rank(self) -> int:
        """This process's index among the run's processes (0 in a single process)."""
        ...

    def train_pass(self) -> Iterator[tuple[Any, Progress]]:
        """One pass over the ``train`` loader: each unit of work and the split's progress
        after it."""
        ...

    def train_step(self, learner: Learner[Any], unit: Any) -> Sequence[TrainOutput[Any]]:
        """Forward and backward on one unit; leave the combined gradients in the main model's
        ``.grad`` slots (adding to them inside an accumulation window)."""
        ...

    def after_optimizer_step(self) -> None:
        """The main model has stepped (e.g. copy its parameters into the replicas)."""
        ...

    def valid_pass(self, name: str) -> Iterator[tuple[Any, Progress]]:
        """One inference pass over the loader placed under ``name`` (``valid``, a test's
        name): each batch and the pass's progress after it."""
        ...

    def inference_step(self, batch: Any, step: Step | None = None) -> Any:
        """The main model's ``inference_step`` on ``batch`` (eval mode, no graph), or ``step``
        when given; None for a rank's empty share of a global batch."""
        ...

    def report(self, items: Sequence[Any], stop: bool) -> tuple[Sequence[Any], int | None]:
        """After a unit: the outputs the main process logs (none elsewhere), and the lowest
        rank that wishes to stop (``stop`` is this process's wish), or None: then no process
        stops."""
        ...

    def decide(self, value: T) -> T:
        """The main process's ``value``, on every process (a JSON value, or bytes)."""
        ...

    def gather(self, value: Any) -> list[Any] | None:
        """Every process's JSON ``value`` in rank order on the main process; None elsewhere."""
        ...

    def check_same(self, facts: Mapping[str, int]) -> None:
        """Raise unless every process runs with the same ``facts`` (epochs, sizes, …)."""
        ...

    def close(self, error: BaseException | None = None) -> None:
        """Release threads, hooks and loaders made for the run; ``error`` is the exception that
        ends the run, if any (a distributed run then tears its process group down, so the
        other processes fail at once instead of waiting for a collective's timeout)."""
        ...


@runtime_checkable
class SupervisedLearningStrategy(Protocol):
    """Where and how the model trains; passed to ``SupervisedTraining.with_training_strategy``
    (and to ``EvaluatorBuilder.with_strategy``, ``predict``).

    A plain class with ``is_main`` and ``start`` is a strategy (see
    ``examples/custom_strategy.py``). It may also have ``check(learner)`` and
    ``use_precision(precision)`` (``StrategyDefaults`` says what a strategy without them
    does).
    """

    @property
    def is_main(self) -> bool:
        """True in the process that renders and writes files (the only one, or rank 0)."""
        ...

    def start(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> StrategyRun:
        """Place ``model`` (moved, replicated or sharded) and each of ``loaders`` (by role:
        ``train``, ``valid``, a test's name) for one run. A training run's optimizers do not
        exist yet: the Learner builds them on the placed parameters right after."""
        ...


class StrategyDefaults:
    """What a strategy without the optional members does."""

    def check(self, learner: Learner[Any]) -> None:
        """Refuse, before anything starts, a learner this strategy cannot train (naming what to
        change); default: every learner is fine."""

    def use_precision(self, precision: Precision) -> None:
        """The run's precision, told right before ``start`` (FSDP casts the parameters it
        gathers); default: nothing to do."""

    def join(self) -> None:
        """Form (or join) the processes of the job before the run starts, when the strategy
        has several: a data module's ``prepare`` runs once per machine and the other processes
        wait for it; default: one process, nothing to join."""


def model_device(model: nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    param = next(model.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


def add_gradients(model: nn.Module, grads: GradientsParams) -> None:
    """Add ``grads`` into ``model``'s ``.grad`` slots (moved to each parameter's device).

    A gradient that already is the slot's tensor (what ``TrainOutput.from_loss`` captures) is
    left alone, so the common step costs a loop of identity checks.
    """
    if grads.owner is model:  # TrainOutput.from_loss's: already in the slots
        return
    params = dict(trained_parameters(model)) if grads else {}
    for name, grad in grads.items():
        param = params[name]
        slot = param.grad
        if slot is grad:
            continue
        if grad.device != param.device:
            grad = grad.to(param.device)
        if slot is None:
            param.grad = grad
        else:
            slot.add_(grad)


def pass_size(loader: DataLoader[Any]) -> tuple[int, int]:
    """A loader's items and batches per pass, -1 each when unknown (a streaming loader): the
    facts every process of a run must agree on (``StrategyRun.check_same``)."""
    items = loader.num_items()
    return (-1, -1) if items is None else (items, len(loader))


def with_progress(loader: DataLoader[Any]) -> Iterator[tuple[Any, Progress]]:
    """``loader``'s batches, each with the pass's progress right after it."""
    iterator = iter(loader)
    for batch in iterator:
        yield batch, iterator.progress()


class LocalRun:
    """The members of a :class:`StrategyRun` that every single-process strategy shares.

    Subclasses set :attr:`replicas` and :attr:`loaders` and implement the training pass and
    step; the inference pass iterates the loader placed under its name on the main model.
    """

    replicas: Sequence[nn.Module]
    loaders: Mapping[str, DataLoader[Any]]

    def valid_pass(self, name: str) -> Iterator[tuple[Any, Progress]]:
        """The batches of the loader placed under ``name``."""
        return with_progress(self.loaders[name])

    def inference_step(self, batch: Any, step: Step | None = None) -> Any:
        """The main model's ``inference_step`` (or ``step``) on ``batch``."""
        if step is not None:
            return step(batch)
        model = cast("InferenceStep[Any, Any]", self.replicas[0])  # checked when it was placed
        return model.inference_step(batch)

    @property
    def rank(self) -> int:
        """Always 0: one process."""
        return 0

    def after_optimizer_step(self) -> None:
        """Nothing to do with one copy of the model."""

    def report(self, items: Sequence[Any], stop: bool) -> tuple[Sequence[Any], int | None]:
        """This process logs its own outputs and stops when it wishes to."""
        return items, 0 if stop else None

    def decide(self, value: T) -> T:
        """The only process decides."""
        return value

    def gather(self, value: Any) -> list[Any] | None:
        """Just this process's value."""
        return [value]

    def check_same(self, facts: Mapping[str, int]) -> None:
        """Nothing to compare with."""

    def close(self, error: BaseException | None = None) -> None:
        """Close the loaders made for the run (their worker threads stop)."""
        for loader in self.loaders.values():
            loader.close()
