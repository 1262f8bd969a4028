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
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ember.train._builder import SupervisedTraining

__all__ = ["EarlyStoppingOptions", "Every", "Limits", "TrainingOptions", "apply_options"]

StrategyName = Literal["single", "ddp", "fsdp"]
_Apply = Callable[["SupervisedTraining", Any], "SupervisedTraining"]


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


def apply_options(builder: SupervisedTraining, options: TrainingOptions) -> SupervisedTraining:
    """Call ``builder``'s method of each field of ``options`` that differs from its default
    (the builder validates each value as its method always does)."""
    if not isinstance(options, TrainingOptions):
        raise TypeError(
            f"with_options takes a TrainingOptions, got {type(options).__name__}: build one, "
            "TrainingOptions(num_epochs=..., ...), or take it as a parameter of ember.cli's main"
        )
    default = TrainingOptions()
    changed = {
        f.name: getattr(options, f.name)
        for f in dataclasses.fields(options)
        if getattr(options, f.name) != getattr(default, f.name)
    }
    for name, value in changed.items():
        builder = _APPLY[name](builder, value)
    return builder


def _every(method: str, value: Every) -> dict[str, Any]:
    given = {key: v for key, v in dataclasses.asdict(value).items() if v is not None}
    if method == "validate_every" and "seconds" in given:
        raise ValueError(
            "validate_every takes steps or epochs, got seconds: validation follows the "
            "training's progress (checkpoint_every takes seconds)"
        )
    return given


def _strategy(builder: SupervisedTraining, name: StrategyName) -> SupervisedTraining:
    from ember.train._strategy.ddp.strategy import DistributedDataParallel
    from ember.train._strategy.fsdp.strategy import FullyShardedDataParallel

    strategies = {"ddp": DistributedDataParallel, "fsdp": FullyShardedDataParallel}
    if name not in strategies:
        raise ValueError(f"strategy must be 'single', 'ddp' or 'fsdp', got {name!r}")
    return builder.with_training_strategy(strategies[name]())


def _early_stopping(
    builder: SupervisedTraining, options: EarlyStoppingOptions
) -> SupervisedTraining:
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
    return builder.early_stopping(strategy)


def _switch(method: str) -> _Apply:
    """A boolean field: its method, called when True (False leaves the builder as it is)."""

    def call(builder: SupervisedTraining, on: bool) -> SupervisedTraining:
        if not isinstance(on, bool):
            raise TypeError(f"{method} must be a bool, got {on!r}")
        called: SupervisedTraining = getattr(builder, method)() if on else builder
        return called

    return call


_APPLY: dict[str, _Apply] = {
    "num_epochs": lambda b, v: b.num_epochs(v),
    "max_steps": lambda b, v: b.max_steps(v),
    "validate_every": lambda b, v: b.validate_every(**_every("validate_every", v)),
    "checkpoint_every": lambda b, v: b.checkpoint_every(**_every("checkpoint_every", v)),
    "grads_accumulation": lambda b, v: b.grads_accumulation(v, mean=b.config.mean_accumulation),
    "grads_accumulation_mean": lambda b, v: b.grads_accumulation(
        b.config.grads_accumulation or 1, mean=v
    ),
    "precision": lambda b, v: b.precision(v),
    "clip_grad_norm": lambda b, v: b.clip_grad_norm(v),
    "clip_grad_value": lambda b, v: b.clip_grad_value(v),
    "compile": _switch("compile"),
    "strategy": _strategy,
    "seed": lambda b, v: b.seed(v),
    "default_checkpointers": _switch("with_default_checkpointers"),
    "resume_latest": _switch("resume_latest"),
    "checkpoint": lambda b, v: b.checkpoint(v),
    "early_stopping": _early_stopping,
    "max_time": lambda b, v: b.max_time(v),
    "fast_dev_run": lambda b, v: b.fast_dev_run(v),
    "limit_batches": lambda b, v: b.limit_batches(train=v.train, valid=v.valid),
    "overfit_batches": lambda b, v: b.overfit_batches(v),
    "summary": _switch("summary"),
    "file_logs": lambda b, v: b if v else b.without_file_logs(),
    "overwrite": _switch("overwrite"),
    "versioned": _switch("versioned"),
    "errors_in_result": _switch("errors_in_result"),
}
"""What each field calls on the builder (``tests/train/test_options.py`` holds each to the
builder call it stands for)."""
