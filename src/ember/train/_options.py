"""``TrainingOptions``: every setting of ``SupervisedTraining`` a config file holds, as one value.

A team's experiment keeps its trainer's settings in YAML, as LightningCLI's ``trainer:`` section
or Hugging Face's ``TrainingArguments`` do. :class:`TrainingOptions` is that section: a frozen
dataclass whose fields are named after the builder methods they call, each defaulting to what
the builder does when the method is not called, so ``SupervisedTraining.with_options(options)``
is the same as calling those methods (a field left at its default calls nothing)::

    def main(training: TrainingOptions = TrainingOptions(), lr: float = 1e-3) -> None:
        ...
        SupervisedTraining("runs/digits", train, valid).with_options(training).launch(learner)

    ember.cli(main)   # --training.num_epochs 20 --training.precision bf16-mixed
                      # --training.seed 7 --training.validate_every.steps 500 ...

Only plain values live here (numbers, names, switches); what is an object (metrics, loggers, a
renderer, a checkpointing strategy, callbacks) is given to the builder in code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Call", "EarlyStoppingOptions", "Every", "Limits", "TrainingOptions", "option_calls"]

StrategyName = Literal["single", "ddp", "fsdp"]


@dataclass(frozen=True)
class Every:
    """An interval in optimizer steps, epochs or seconds (give one; none: the default)."""

    steps: int | None = None
    """Every this many optimizer steps."""
    epochs: int | None = None
    """Every this many epochs."""
    seconds: float | None = None
    """Every this many seconds (checkpoint_every only)."""


@dataclass(frozen=True)
class Limits:
    """How many batches of each pass to use (``limit_batches``); none: all of them."""

    train: int | None = None
    """The first batches of each train pass."""
    valid: int | None = None
    """The first batches of each validation pass."""


@dataclass(frozen=True)
class EarlyStoppingOptions:
    """Early stopping on a metric (``early_stopping(MetricEarlyStoppingStrategy(...))``)."""

    metric: str | None = None
    """The metric watched (e.g. Loss); none: no early stopping."""
    patience: int = 2
    """Stop once this many epochs passed without a new best value."""
    direction: Literal["lowest", "highest"] = "lowest"
    """Which way is better."""
    split: Literal["valid", "train"] = "valid"
    """The split whose epoch values are watched."""


@dataclass(frozen=True)
class TrainingOptions:
    """Every setting of SupervisedTraining a config file holds, named after its builder method.

    Each field defaults to what the builder does without the method; ``with_options`` calls the
    method of each field that differs from its default.
    """

    num_epochs: int = 1
    """Train until this epoch (absolute, also when resuming)."""
    max_steps: int | None = None
    """End the run after this many optimizer steps (absolute; with num_epochs: the first)."""
    validate_every: Every = field(default_factory=Every)
    """Validate every N steps or N epochs (default: every epoch)."""
    checkpoint_every: Every = field(default_factory=Every)
    """Checkpoint every N steps, seconds or epochs (default: at every validation)."""
    grads_accumulation: int = 1
    """One optimizer step per this many batches."""
    grads_accumulation_mean: bool = False
    """Weight accumulated batches by their items: a window equals one big batch (Trainer's)."""
    precision: Literal["32", "bf16-mixed", "16-mixed"] = "32"
    """Train in float32, or mixed precision with bfloat16 or float16 (loss scaling)."""
    clip_grad_norm: float | None = None
    """Clip the total gradient norm of every optimizer step to this value."""
    clip_grad_value: float | None = None
    """Clamp every gradient element to [-value, value]."""
    compile: bool = False
    """Compile the model with torch.compile at launch."""
    strategy: StrategyName = "single"
    """Where the model trains: single (one device), ddp or fsdp (torch's data parallelism)."""
    seed: int | None = None
    """Seed torch, numpy and Python's random at launch, on every process (none: not seeded)."""
    default_checkpointers: bool = False
    """Checkpoint into DIR/checkpoint (the last 2 epochs and the best valid Loss)."""
    resume_latest: bool = False
    """Resume from the newest complete checkpoint, or start afresh if there is none."""
    checkpoint: int | None = None
    """Resume from the checkpoint of this epoch."""
    early_stopping: EarlyStoppingOptions = field(default_factory=EarlyStoppingOptions)
    """Stop when a metric has not improved for some epochs."""
    max_time: float | None = None
    """Stop after the step past this many seconds of training."""
    fast_dev_run: int | None = None
    """Run this many train and valid batches of one epoch, keeping nothing (a quick check)."""
    limit_batches: Limits = field(default_factory=Limits)
    """Use only the first batches of each pass."""
    overfit_batches: int | None = None
    """Train and validate on the items of the first N train batches."""
    summary: bool = False
    """Print the summary table at the end and write summary.json."""
    file_logs: bool = True
    """Write the metric files under the run directory (false: only the given loggers)."""
    overwrite: bool = False
    """Start afresh in a directory that holds an earlier run, removing what ember wrote there."""
    versioned: bool = False
    """Launch into a new DIR/version_N each time."""
    errors_in_result: bool = False
    """Return a failed training's error in the result instead of raising TrainingError."""


Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""A builder method's name and its arguments."""


def option_calls(options: TrainingOptions) -> list[Call]:
    """The builder calls ``options`` stands for: the method of each field that differs from
    its default, in field order (``SupervisedTraining.with_options`` makes them, so each value
    is checked as its method always checks it)."""
    if not isinstance(options, TrainingOptions):
        raise TypeError(
            f"with_options takes a TrainingOptions, got {type(options).__name__}: build one, "
            "TrainingOptions(num_epochs=..., ...), or take it as a parameter of ember.cli's main"
        )
    default = TrainingOptions()
    calls: list[Call] = []
    for f in dataclasses.fields(options):
        value = getattr(options, f.name)
        if value != getattr(default, f.name):
            calls.extend(_CALLS[f.name](value, options))
    return calls


def _every(method: str, value: Every) -> list[Call]:
    given = {key: v for key, v in dataclasses.asdict(value).items() if v is not None}
    if method == "validate_every" and "seconds" in given:
        raise ValueError(
            "validate_every takes steps or epochs, got seconds: validation follows the "
            "training's progress (checkpoint_every takes seconds)"
        )
    return [(method, (), given)]


def _strategy(name: StrategyName) -> list[Call]:
    from ember.train._strategy.ddp.strategy import DistributedDataParallel
    from ember.train._strategy.fsdp.strategy import FullyShardedDataParallel

    strategies = {"ddp": DistributedDataParallel, "fsdp": FullyShardedDataParallel}
    if name not in strategies:
        raise ValueError(f"strategy must be 'single', 'ddp' or 'fsdp', got {name!r}")
    return [("with_training_strategy", (strategies[name](),), {})]


def _early_stopping(options: EarlyStoppingOptions) -> list[Call]:
    from ember.train._early_stopping import MetricEarlyStoppingStrategy, StoppingCondition

    if options.metric is None:
        raise ValueError(
            "early_stopping needs a metric to watch (early_stopping.metric), e.g. 'Loss'"
        )
    strategy = MetricEarlyStoppingStrategy(
        options.metric,
        options.direction,
        options.split,
        StoppingCondition.no_improvement_since(options.patience),
    )
    return [("early_stopping", (strategy,), {})]


def _switch(method: str) -> Callable[[Any, TrainingOptions], list[Call]]:
    """A boolean field: its method, called when True (False leaves the builder as it is)."""

    def calls(on: Any, _: TrainingOptions) -> list[Call]:
        if not isinstance(on, bool):
            raise TypeError(f"{method} must be a bool, got {on!r}")
        return [(method, (), {})] if on else []

    return calls


def _one(method: str) -> Callable[[Any, TrainingOptions], list[Call]]:
    """A field whose value is its method's one argument."""
    return lambda value, _: [(method, (value,), {})]


_CALLS: dict[str, Callable[[Any, TrainingOptions], list[Call]]] = {
    "num_epochs": _one("num_epochs"),
    "max_steps": _one("max_steps"),
    "validate_every": lambda v, _: _every("validate_every", v),
    "checkpoint_every": lambda v, _: _every("checkpoint_every", v),
    "grads_accumulation": lambda v, o: [
        ("grads_accumulation", (v,), {"mean": o.grads_accumulation_mean})
    ],
    "grads_accumulation_mean": lambda v, o: [
        ("grads_accumulation", (o.grads_accumulation,), {"mean": v})
    ],
    "precision": _one("precision"),
    "clip_grad_norm": _one("clip_grad_norm"),
    "clip_grad_value": _one("clip_grad_value"),
    "compile": _switch("compile"),
    "strategy": lambda v, _: _strategy(v),
    "seed": _one("seed"),
    "default_checkpointers": _switch("with_default_checkpointers"),
    "resume_latest": _switch("resume_latest"),
    "checkpoint": _one("checkpoint"),
    "early_stopping": lambda v, _: _early_stopping(v),
    "max_time": _one("max_time"),
    "fast_dev_run": _one("fast_dev_run"),
    "limit_batches": lambda v, _: [("limit_batches", (), {"train": v.train, "valid": v.valid})],
    "overfit_batches": _one("overfit_batches"),
    "summary": _switch("summary"),
    "file_logs": lambda v, _: [] if v else [("without_file_logs", (), {})],
    "overwrite": _switch("overwrite"),
    "versioned": _switch("versioned"),
    "errors_in_result": _switch("errors_in_result"),
}
"""The builder calls of each field (``tests/train/test_options.py`` holds each to the builder
call it stands for)."""
