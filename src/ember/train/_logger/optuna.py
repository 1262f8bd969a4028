"""Pruning an Optuna trial: report a validation value each round, stop the run when pruned.

Needs the ``ember[optuna]`` extra, imported only when one is created::

    def objective(trial):
        pruning = OptunaPruning(trial, "Loss")                 # the valid split's Loss
        result = (SupervisedTraining(f"sweep/{trial.number}", train, valid)
                  .metrics(LossMetric()).num_epochs(20).with_default_checkpointers()
                  .with_metric_logger(pruning)
                  .launch(Learner(model, optim.Adam(model.parameters()), trial.suggest_float(...))))
        return pruning.result()           # the last value reported; raises TrialPruned if pruned

It does what optuna-integration's ``PyTorchLightningPruningCallback`` does, with ember's stop
path: at the end of each validation, ``trial.report(value, step)`` with the epoch value of the
chosen metric and split, then ``trial.should_prune()``; when it says so, the run is stopped
through its interrupter (``use_interrupter``) with the reason ``pruned by optuna at epoch E
(trial N)``, which ``result.stop_reason`` and the summary carry. Training ends after that
round, its checkpoint is written as at any stop, and the directory stays a valid run that
``resume_latest()`` would continue; :meth:`OptunaPruning.result` then raises
``optuna.TrialPruned`` so that Optuna records the trial as pruned.

**The step reported is the round, counted from 0** (``epoch - 1``): the Lightning callback
reports ``trainer.current_epoch``, which counts from 0, and Optuna's pruners count their
``n_warmup_steps`` and ``interval_steps`` from 0. So a ``MedianPruner`` prunes the same trials
at the same epochs as it does with Lightning, for the same values; reporting ember's 1-based
epoch would prune one round earlier. In a step run (``validate_every(steps=N)``) a round is a
validation: the step is the number of validations before this one (Lightning reports the epoch
there, the same for every validation inside it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember.train._interrupter import Interrupter
from ember.train._metric.values import MetricValue
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["OptunaPruning"]


def _optuna() -> Any:
    try:
        import optuna
    except ImportError as error:
        raise ImportError("OptunaPruning needs optuna: pip install ember[optuna]") from error
    return optuna


class OptunaPruning:
    """Reports ``metric``'s epoch value on ``split`` to the Optuna ``trial`` after every
    validation, and stops the run when the trial should be pruned (see the module doc).

    Pass it to ``SupervisedTraining.with_metric_logger``; after ``launch``, :meth:`result`
    gives the objective's value or raises ``optuna.TrialPruned``.
    """

    def __init__(self, trial: Any, metric: str = "Loss", split: str | Split = "valid") -> None:
        optuna = _optuna()
        if not isinstance(trial, optuna.trial.BaseTrial):
            raise TypeError(
                f"trial must be the optuna trial the objective was given, got "
                f"{type(trial).__name__}"
            )
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"metric must be a metric's name, such as 'Loss', got {metric!r}")
        if split not in ("train", "valid", Split.TRAIN, Split.VALID):
            raise ValueError(f"split must be 'train' or 'valid', got {split!r}")
        self.trial = trial
        self.metric = metric
        self.split = Split(split)
        self.reported: dict[int, float] = {}
        """The values reported to the trial this launch, by epoch."""
        self.pruned_at: int | None = None
        """The epoch after which the trial was pruned, or None."""
        self._interrupter: Interrupter | None = None
        self._value: float | None = None

    def use_interrupter(self, interrupter: Interrupter) -> None:
        """Keep the run's interrupter: pruning stops the run through it."""
        self._interrupter = interrupter

    def start(self, config: Mapping[str, Any]) -> None:
        """Refuse, before training, a metric the run does not log on the split."""
        registered = config.get("metrics", {}).get(self.split.value, [])
        if self.metric not in registered:
            raise ValueError(
                f"OptunaPruning reports the {self.split.value} metric {self.metric!r}, which "
                f"this run does not register (its {self.split.value} metrics: {registered}); "
                "register it (e.g. metric_valid_numeric(LossMetric())) or name one of those"
            )
        if self._interrupter is None:
            raise ValueError(
                "OptunaPruning stops the run through its interrupter: give it to the run with "
                "SupervisedTraining.with_metric_logger(pruning)"
            )
        self.reported.clear()
        self.pruned_at = None

    def log(self, values: Sequence[MetricValue]) -> None:
        """Keep the epoch value of the metric when it comes (at the split's end)."""
        for value in values:
            if value.final and value.name == self.metric and value.split is self.split:
                self._value = value.value

    def end_split(self, epoch: int, split: Split) -> None:
        """Report the split's value at step ``epoch - 1``; stop the run when pruned."""
        value, self._value = self._value, None
        if split is not self.split or value is None or self.pruned_at is not None:
            return
        self.trial.report(value, step=epoch - 1)
        self.reported[epoch] = value
        if self.trial.should_prune():
            self.pruned_at = epoch
            assert self._interrupter is not None  # start() refused a run without one
            self._interrupter.stop(self.reason)

    @property
    def reason(self) -> str:
        """The stop reason of a pruned run: ``pruned by optuna at epoch E (trial N)``."""
        return f"pruned by optuna at epoch {self.pruned_at} (trial {self.trial.number})"

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Nothing to record."""

    def close(self) -> None:
        """Nothing to release."""

    def result(self) -> float:
        """The objective's value: the last value reported. Raises ``optuna.TrialPruned`` when
        the run was pruned (Optuna then records the trial as pruned), and ``ValueError`` when
        nothing was reported (the run validated no epoch)."""
        if self.pruned_at is not None:
            raise _optuna().TrialPruned(self.reason)
        if not self.reported:
            raise ValueError(
                f"no {self.split.value} {self.metric!r} value was reported to trial "
                f"{self.trial.number}: the run validated no epoch"
            )
        return self.reported[max(self.reported)]
