"""``lr_find``: the learning-rate range test, written on the public callbacks alone.

The test (Smith's, as Lightning's ``lr_find`` and fastai's ``lr_find`` run it) trains the
model for up to ``num_steps`` optimizer steps on the run's train loader with the lr rising from
``min_lr`` to ``max_lr`` (exponentially, or linearly), each step's loss read back, and stops
once the smoothed loss is more than ``stop_factor`` times its best (or not finite). The
suggestion is the lr where the smoothed loss falls fastest (the steepest negative slope against
``log10(lr)``), leaving out the first steps and the last. Everything the test changes is put
back afterwards: the model's weights and buffers, the optimizer's and the scheduler's state, the
RNG states of torch, numpy and Python, so a training launched next is the one it would have
been. The sweep runs in a temporary directory (nothing is written in the run's), without
validation, metrics or checkpoints, with the run's strategy, precision, accumulation and
clipping.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import random
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch

from ember._checks import check_positive_int, check_real
from ember.train._builder import SupervisedTraining
from ember.train._callbacks.base import Callback, RunView
from ember.train._interrupter import Interrupter
from ember.train._learner import Learner
from ember.train._renderer.cli import CliMetricsRenderer

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["LrFindResult", "lr_find"]

_SMOOTHING = 0.98  # the loss's exponential moving average, debiased (fastai's, Lightning's)
_SKIP_START, _SKIP_END = 10, 1  # steps the suggestion leaves out (Lightning's defaults)


@dataclass(frozen=True, slots=True)
class LrFindResult:
    """What :func:`lr_find` measured: each step's lr and loss, and the suggested lr.

    ``smoothed`` are the losses as the test smoothed them; ``suggestion`` is None when the test
    had too few steps to tell; ``stop_reason`` says why it stopped early, if it did."""

    lrs: tuple[float, ...]
    losses: tuple[float, ...]
    smoothed: tuple[float, ...]
    suggestion: float | None
    stop_reason: str | None

    def plot(self, path: str | Path | None = None) -> Figure:
        """The smoothed loss against the lr (log scale), the suggestion marked; written to
        ``path`` when given (needs matplotlib: ``pip install ember[plot]``)."""
        try:
            from matplotlib.figure import Figure
        except ImportError as error:  # an optional extra
            raise ImportError(
                "LrFindResult.plot needs matplotlib: pip install 'ember[plot]'"
            ) from error
        figure = Figure(figsize=(6, 4))
        axes = figure.add_subplot()
        axes.plot(self.lrs, self.smoothed, label="loss (smoothed)")
        axes.set_xscale("log")
        axes.set_xlabel("learning rate")
        axes.set_ylabel("loss")
        if self.suggestion is not None:
            axes.axvline(self.suggestion, color="red", linestyle="--")
            axes.set_title(f"suggested lr {self.suggestion:.3g}")
        axes.legend()
        if path is not None:
            figure.savefig(path)
        return figure


class _RangeTest(Callback):
    """Sets each step's lr (every param group keeping its ratio to group 0) and records the
    loss; stops when it diverges. Also keeps the optimizer's state from before the sweep."""

    def __init__(self, lrs: Sequence[float], stop_factor: float) -> None:
        self.lrs, self.stop_factor = list(lrs), stop_factor
        self.seen: list[float] = []
        self.losses: list[float] = []
        self.smoothed: list[float] = []
        self.optimizer_state: dict[str, Any] | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self._ratios: list[float] = []
        self._average = 0.0

    def on_run_start(self, run: RunView) -> None:
        optimizer = self.optimizer = run.optimizer
        self.optimizer_state = copy.deepcopy(optimizer.state_dict())
        first = float(optimizer.param_groups[0]["lr"]) or 1.0
        self._ratios = [float(group["lr"]) / first for group in optimizer.param_groups]

    def on_before_optimizer_step(self, step: RunView) -> None:
        lr = self.lrs[len(self.losses)]
        for group, ratio in zip(step.optimizer.param_groups, self._ratios, strict=True):
            group["lr"] = lr * ratio
        self.seen.append(lr)

    def on_after_optimizer_step(self, step: RunView) -> None:
        loss = step.loss
        value = math.nan if loss is None else float(loss.float().mean())  # the test's sync
        self.losses.append(value)
        count = len(self.losses)
        self._average = _SMOOTHING * self._average + (1 - _SMOOTHING) * value
        smoothed = self._average / (1 - _SMOOTHING**count)
        self.smoothed.append(smoothed)
        best = min(self.smoothed)
        if not math.isfinite(smoothed) or (count > 1 and smoothed > self.stop_factor * best):
            step.stop(f"lr_find: the loss diverged at lr {self.seen[-1]:.3g}")


def lr_find(
    training: SupervisedTraining,
    learner: Learner[Any],
    *,
    min_lr: float = 1e-7,
    max_lr: float = 1.0,
    num_steps: int = 100,
    mode: Literal["exponential", "linear"] = "exponential",
    stop_factor: float = 4.0,
) -> LrFindResult:
    """The learning-rate range test of ``learner`` on ``training``'s train loader.

    Everything it changes is put back (see the module doc); the result has the suggestion and
    a plot."""
    low = check_real("min_lr", min_lr, minimum=0.0, strict=True)
    high = check_real("max_lr", max_lr, minimum=low, strict=True)
    steps = check_positive_int("num_steps", num_steps)
    factor = check_real("stop_factor", stop_factor, minimum=1.0, strict=True)
    if mode not in ("exponential", "linear"):
        raise ValueError(f"mode must be 'exponential' or 'linear', got {mode!r}")
    if not isinstance(learner, Learner):
        raise TypeError(f"lr_find needs a Learner, got {type(learner).__name__}")
    if learner.several_optimizers:
        raise ValueError(
            "lr_find sweeps the lr of one optimizer, and this Learner has several (or none)"
        )
    test = _RangeTest(_lrs(low, high, steps, mode), factor)
    with _kept(learner, test), tempfile.TemporaryDirectory(prefix="ember-lr-find-") as directory:
        result = _sweep(training, Path(directory), steps, test).launch(learner)
    return LrFindResult(
        tuple(test.seen[: len(test.losses)]),
        tuple(test.losses),
        tuple(test.smoothed),
        _suggestion(test.seen[: len(test.losses)], test.smoothed),
        result.stop_reason,
    )


def _lrs(low: float, high: float, steps: int, mode: str) -> list[float]:
    if steps == 1:
        return [low]
    if mode == "linear":
        return [low + (high - low) * i / (steps - 1) for i in range(steps)]
    return [low * (high / low) ** (i / (steps - 1)) for i in range(steps)]


def _suggestion(lrs: Sequence[float], smoothed: Sequence[float]) -> float | None:
    """The lr of the steepest descent of the smoothed loss against ``log10(lr)``."""
    kept = list(zip(lrs, smoothed, strict=True))[_SKIP_START : len(lrs) - _SKIP_END]
    kept = [(lr, loss) for lr, loss in kept if math.isfinite(loss)]
    if len(kept) < 3:
        return None
    import numpy as np

    logs = np.log10([lr for lr, _ in kept])
    slopes = np.gradient(np.array([loss for _, loss in kept]), logs)
    return float(kept[int(np.argmin(slopes))][0])


def _sweep(
    training: SupervisedTraining, directory: Path, steps: int, test: _RangeTest
) -> SupervisedTraining:
    """A builder of the sweep: ``training``'s train loader and how it steps (strategy,
    precision, accumulation, clipping), nothing else it keeps or shows."""
    config = dataclasses.replace(
        training.config,
        directory=directory,
        valid=None,
        metrics=(),
        summary_metrics=frozenset(),
        num_epochs=1,
        epochs_given=False,
        max_steps=steps,
        checkpoint_every=None,
        compile_options=None,
        hooks=(),
        callbacks=(test,),
        max_time=None,
        stateful=(),
        renderer=CliMetricsRenderer(io.StringIO()),
        summary=False,
        loggers=(),
        application_log=None,
        interrupter=Interrupter(),
        early_stopping=None,
        checkpointer=None,
        checkpointing_strategy=None,
        resume=None,
        tests=(),
        file_logs=False,
        hparams={},
        overwrite=False,
        versioned=False,
        errors_in_result=False,
    )
    sweep = SupervisedTraining(directory, config.train_loader)
    sweep._config = config  # the builder's config, as its methods would have made it
    return sweep


class _kept:  # noqa: N801  # used as a context manager
    """Put back what the range test changes: the weights and buffers, the optimizer's and the
    scheduler's state, ``lr_current`` and the RNG states."""

    def __init__(self, learner: Learner[Any], test: _RangeTest) -> None:
        self.learner, self.test = learner, test

    def __enter__(self) -> None:
        learner = self.learner
        self.weights = copy.deepcopy(learner.model.state_dict())
        scheduler = learner.lr_scheduler
        self.scheduler = None if scheduler is None else copy.deepcopy(scheduler.state_dict())
        self.lr = learner.lr_current
        self.rng = (torch.get_rng_state(), random.getstate(), _numpy_state(), _cuda_states())

    def __exit__(self, *exc: object) -> None:
        learner, test = self.learner, self.test
        learner.model.load_state_dict(self.weights)
        if test.optimizer is not None and test.optimizer_state is not None:
            test.optimizer.load_state_dict(test.optimizer_state)
        if self.scheduler is not None and learner.lr_scheduler is not None:
            learner.lr_scheduler.load_state_dict(self.scheduler)
        learner.lr_current = self.lr
        torch_state, python_state, numpy_state, cuda_states = self.rng
        torch.set_rng_state(torch_state)
        random.setstate(python_state)
        if numpy_state is not None:
            import numpy as np

            np.random.set_state(numpy_state)
        if cuda_states:
            torch.cuda.set_rng_state_all(cuda_states)


def _numpy_state() -> Any:
    import numpy as np

    return np.random.get_state()


def _cuda_states() -> list[torch.Tensor]:
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
