"""The events the training loop emits; the metrics thread turns them into numbers and lines.

Order for one run (single device, no interrupt; ``docs/design.md``, "Event order")::

    train: Start(total_epochs, starting_epoch)
    for each epoch e:
        train: StartSplit(e, n_train) · ProcessedItem (one per batch) · EndSplit(e)
        valid: StartSplit(e, n_valid) · ProcessedItem (one per batch) · EndSplit(e)
        train: EndEpoch(e)
    train: End(summary)

A run of several validation sets validates them in order inside that one valid split:
``n_valid`` counts the items of every set, and each ``ProcessedItem`` names its set
(``valid_set``; None for the main one).

An evaluation (``Evaluator.eval_all``) speaks its own words, on the ``test`` split::

    StartEvaluation(total_tests)
    for each test: StartTest(name, n_items) · ProcessedItem (one per batch) · EndTest(name)
    EndEvaluation(summary)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ember._frozen import set_field
from ember.data import Progress

__all__ = [
    "End",
    "EndEpoch",
    "EndEvaluation",
    "EndSplit",
    "EndTest",
    "EvaluatorEvent",
    "LearnerEvent",
    "ProcessedItem",
    "Start",
    "StartEvaluation",
    "StartSplit",
    "StartTest",
    "TrainingItem",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, init=False)
class TrainingItem(Generic[T]):
    """One batch's output with where it came from and the learning rate it was trained with.

    ``step`` is the number of optimizer steps the run has taken so far (it goes on across a
    resume): the global step loggers and trackers plot against.
    """

    item: T
    progress: Progress
    iteration: int
    lr: float | None
    step: int = 0
    grad_norm: Any = None
    """The total gradient norm of the optimizer step this batch closed (a tensor, read on the
    metrics thread), when the run measures it (clipping by norm, ``GradNormMetric``)."""
    values: Mapping[str, Any] | None = None
    """What the batch's step logged with ``current_step().log(name, value)``, or None."""

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self,
        item: T,
        progress: Progress,
        iteration: int,
        lr: float | None,
        step: int = 0,
        grad_norm: Any = None,
        values: Mapping[str, Any] | None = None,
    ) -> None:
        set_field(self, "item", item)
        set_field(self, "progress", progress)
        set_field(self, "iteration", iteration)
        set_field(self, "lr", lr)
        set_field(self, "step", step)
        set_field(self, "grad_norm", grad_norm)
        set_field(self, "values", values)


@dataclass(frozen=True, slots=True)
class Start:
    """Training begins (or resumes at ``starting_epoch``).

    When ``max_steps`` bounds the run, ``total_steps`` is the number of optimizer steps it will
    have (None otherwise) and ``starting_step`` the steps taken before (a resume): the progress
    is then shown in steps. ``stop_checkpoints``: a stop inside a round writes a mid-round
    checkpoint there (``checkpoint/step-N/``), which a resume continues from; False when the run
    cannot take them (no checkpointers, a train metric without state) and a stop abandons the
    round.
    """

    total_epochs: int
    starting_epoch: int
    total_steps: int | None = None
    starting_step: int = 0
    stop_checkpoints: bool = False


@dataclass(frozen=True, slots=True)
class StartSplit:
    """A split (train or valid pass) of ``epoch`` begins over ``total_items`` items (None when
    unknown: a streaming loader, or a round of steps). ``items_done``: the items of its pass
    processed before it started, when it goes on from a mid-round checkpoint."""

    epoch: int
    total_items: int | None
    items_done: int = 0


@dataclass(frozen=True, slots=True, init=False)
class ProcessedItem(Generic[T]):
    """A batch was processed.

    ``valid_set``: the validation set a validation batch belongs to, by name, in a run of
    several (None for the main one, and for every training batch).
    """

    item: TrainingItem[T]
    valid_set: str | None = None

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self, item: TrainingItem[T], valid_set: str | None = None
    ) -> None:
        set_field(self, "item", item)
        set_field(self, "valid_set", valid_set)


@dataclass(frozen=True, slots=True)
class EndSplit:
    """The split of ``epoch`` ended."""

    epoch: int


@dataclass(frozen=True, slots=True)
class EndEpoch:
    """Both splits of ``epoch`` ended."""

    epoch: int


@dataclass(frozen=True, slots=True)
class End:
    """Training ended; ``summary`` is set when the builder asked for one."""

    summary: Any = None


LearnerEvent = Start | StartSplit | ProcessedItem[Any] | EndSplit | EndEpoch | End
"""What training emits: ``Start``; for each split of an epoch ``StartSplit``, a ``ProcessedItem``
per batch and ``EndSplit``; ``EndEpoch`` once both splits ended; ``End`` last."""


@dataclass(frozen=True, slots=True)
class StartEvaluation:
    """An evaluation of ``total_tests`` tests begins."""

    total_tests: int


@dataclass(frozen=True, slots=True)
class StartTest:
    """The test ``name`` begins over ``total_items`` items (None: a stream of unknown length)."""

    name: str
    total_items: int | None


@dataclass(frozen=True, slots=True)
class EndTest:
    """The test ``name`` ended."""

    name: str


@dataclass(frozen=True, slots=True)
class EndEvaluation:
    """Every test ended; ``summary`` is the table of their values, when one was asked for."""

    summary: Any = None


EvaluatorEvent = StartEvaluation | StartTest | ProcessedItem[Any] | EndTest | EndEvaluation
"""What an evaluation emits: ``StartEvaluation``; for each test ``StartTest``, a ``ProcessedItem``
per batch and ``EndTest``; then ``EndEvaluation``."""
