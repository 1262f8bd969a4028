"""OptunaPruning against the real optuna package (in-memory studies): a pruned trial stops its
run through the interrupter, leaving a valid, resumable run; 8 trials with a MedianPruner are
pruned exactly where Lightning's PyTorchLightningPruningCallback would prune them; bad input
is refused at launch; examples/sweep.py runs."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.runs import load
from ember.train import Learner, LossMetric, OptunaPruning
from tests.train.fixtures import TinyRegressor, ember_threads, loader, quiet

optuna = pytest.importorskip(
    "optuna", reason="OptunaPruning needs optuna: pip install ember[optuna]"
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")


def run_trial(directory: Path, pruning: OptunaPruning, lr: float, *, epochs: int = 5) -> Any:
    """A run of the tiny regressor with Loss on both splits and checkpoints, pruned by
    ``pruning``."""
    torch.manual_seed(0)
    model = TinyRegressor()
    return (
        quiet(directory, loader(16, shuffle=1), loader(8, seed=1))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .summary()
        .with_default_checkpointers()
        .with_metric_logger(pruning)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=lr)))
    )


def study(seed: int = 3) -> Any:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
    )


def test_a_pruned_trial_stops_its_run_as_an_interrupt(tmp_path: Path) -> None:
    """Pruned after epoch 2 (a pruner that prunes any value from step 1 on): no error, the
    stop reason names optuna, the epoch and the trial, epoch 3 never trains, the run reads back
    as stopped and not finished, resumes to its end, and result() raises TrialPruned."""
    trials = optuna.create_study(
        pruner=optuna.pruners.ThresholdPruner(upper=-1.0, n_warmup_steps=1)
    )
    trial = trials.ask()
    pruning = OptunaPruning(trial, "Loss")
    result = run_trial(tmp_path / "run", pruning, 0.05)
    assert result.error is None and ember_threads() == []
    assert result.stop_reason == "pruned by optuna at epoch 2 (trial 0)"
    assert result.last_epoch == 2 and result.summary.stop_reason == result.stop_reason
    assert sorted(pruning.reported) == [1, 2]
    assert trial.storage.get_trial(trial._trial_id).intermediate_values == {
        0: pruning.reported[1],
        1: pruning.reported[2],
    }
    assert not (tmp_path / "run" / "train" / "epoch-3").exists()
    run = load(tmp_path / "run")
    assert (run.stop_reason, run.finished, run.last_epoch) == (result.stop_reason, False, 2)
    with pytest.raises(optuna.TrialPruned, match="pruned by optuna at epoch 2"):
        pruning.result()
    torch.manual_seed(0)
    model = TinyRegressor()
    resumed = (
        quiet(tmp_path / "run", loader(16, shuffle=1), loader(8, seed=1))
        .metrics(LossMetric())
        .num_epochs(5)
        .with_default_checkpointers()
        .resume_latest()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    )
    assert (resumed.stop_reason, resumed.last_epoch) == (None, 5)
    assert load(tmp_path / "run").finished


def test_eight_trials_are_pruned_where_the_lightning_callback_prunes_them(tmp_path: Path) -> None:
    """8 trials (TPE, MedianPruner with a warm-up step) through ember: some pruned, some not.
    The same values reported as PyTorchLightningPruningCallback reports them (step =
    Lightning's 0-based current_epoch, should_prune after each, TrialPruned when it says so) on
    a second study with the same sampler seed make the same decisions at the same epochs, with
    the same parameters suggested; reporting ember's 1-based epoch instead would not."""
    ember_study, runs = study(), {}

    def objective(trial: Any) -> float:
        pruning = OptunaPruning(trial, "Loss")
        run_trial(tmp_path / f"trial-{trial.number}", pruning, trial.suggest_float("lr", 1e-3, 0.3))
        runs[trial.number] = pruning
        return pruning.result()

    ember_study.optimize(objective, n_trials=8)
    ember_states = [trial.state for trial in ember_study.trials]
    pruned = {n: p.pruned_at for n, p in runs.items() if p.pruned_at is not None}
    assert 0 < len(pruned) < 8, ember_states
    # each trial's valid Loss by epoch, read back from its run directory
    values = {n: load(tmp_path / f"trial-{n}").values("valid", "Loss") for n in runs}
    for number, pruning in runs.items():
        assert values[number] == pruning.reported

    def lightning_like(first_step: int) -> tuple[list[Any], dict[int, int]]:
        """Replay each trial's values as the Lightning callback reports them (first_step=0),
        or with 1-based steps (first_step=1); the epochs (1-based) trials were pruned at."""
        replay, pruned_at = study(), {}

        def objective(trial: Any) -> float:
            lr = trial.suggest_float("lr", 1e-3, 0.3)
            assert lr == ember_study.trials[trial.number].params["lr"]
            seen = values[trial.number]
            for epoch, value in seen.items():
                trial.report(value, step=epoch - 1 + first_step)
                if trial.should_prune():
                    pruned_at[trial.number] = epoch
                    raise optuna.TrialPruned(f"Trial was pruned at epoch {epoch - 1}.")
            return seen[max(seen)]

        replay.optimize(objective, n_trials=8)
        return [trial.state for trial in replay.trials], pruned_at

    lightning_states, lightning_pruned = lightning_like(first_step=0)
    assert lightning_states == ember_states
    assert lightning_pruned == pruned
    _, one_based = lightning_like(first_step=1)
    assert one_based != pruned


def test_a_metric_the_run_does_not_log_is_refused_at_launch(tmp_path: Path) -> None:
    """A metric not registered on the split stops the launch before training, naming it and
    the split's metrics; a trial that is not one, a bad split, are refused at the call."""
    trial = optuna.create_study().ask()
    with pytest.raises(ValueError, match=r"'Accuracy', which this run does not register .*'Loss'"):
        run_trial(tmp_path / "run", OptunaPruning(trial, "Accuracy"), 0.05)
    assert not (tmp_path / "run" / "train").exists()
    with pytest.raises(TypeError, match="trial must be the optuna trial"):
        OptunaPruning("trial-0")
    with pytest.raises(ValueError, match="split must be 'train' or 'valid'"):
        OptunaPruning(trial, "Loss", split="test")


def test_without_optuna_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the optuna package, OptunaPruning says what to install."""
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(ImportError, match=r"pip install ember\[optuna\]"):
        OptunaPruning(object())


@pytest.mark.slow
def test_the_sweep_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/sweep.py: 8 trials, some pruned (their runs stopped as pruned), the best one
    complete, every trial's run read back and compared."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    example = importlib.import_module("sweep")
    finished = example.main(["--trials", "8", "--epochs", "4", "--dir", str(tmp_path)])
    states = [trial.state for trial in finished.trials]
    assert optuna.trial.TrialState.PRUNED in states
    assert finished.best_trial.state == optuna.trial.TrialState.COMPLETE
    out = capsys.readouterr().out
    for trial in finished.trials:
        run = load(tmp_path / f"trial-{trial.number}")
        pruned = trial.state == optuna.trial.TrialState.PRUNED
        assert (run.stop_reason or "").startswith("pruned by optuna") == pruned
        assert f"trial-{trial.number}: epoch" in out
    assert "Valid Loss (lower is better)" in out
