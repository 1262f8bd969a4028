"""A hyper-parameter sweep with Optuna: 8 trials of the seed's MLP regression, pruned by a
``MedianPruner`` on the valid Loss, then the runs read back, compared and plotted.

``OptunaPruning`` reports the valid Loss to the trial after every epoch (at step ``epoch - 1``,
as Lightning's callback does) and stops a trial's run through its interrupter when the pruner
says so: the run ends normally, its ``result.stop_reason`` says ``pruned by optuna at epoch E
(trial N)``, and ``pruning.result()`` raises ``optuna.TrialPruned`` so that Optuna records it.
Each trial is a run directory; ``ember.runs`` reads them all back. The data is generated:
nothing is downloaded. Needs ``pip install ember[optuna]`` (and ``ember[plot]`` for the plot).

    python examples/sweep.py --trials 8 --dir artifacts/sweep
    ember compare artifacts/sweep/trial-*
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
from typing import Any

import torch

import ember.runs
from ember.app.demo import Mlp, make_samples, sample_batcher
from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import CliMetricsRenderer, Learner, LossMetric, OptunaPruning, SupervisedTraining


def objective(trial: Any, directory: Path, epochs: int) -> float:
    """Train the seed's MLP with the trial's learning rate; the last valid Loss is its value."""
    lr = trial.suggest_float("lr", 1e-3, 3e-1, log=True)
    torch.manual_seed(0)
    samples = make_samples(96, seed=0)
    train = DataLoaderBuilder(sample_batcher).batch_size(16).shuffle(1)
    valid = DataLoaderBuilder(sample_batcher).batch_size(32)
    model = Mlp()
    pruning = OptunaPruning(trial, "Loss")
    (
        SupervisedTraining(
            directory / f"trial-{trial.number}",
            train.build(InMemDataset(samples[:64])),
            valid.build(InMemDataset(samples[64:])),
        )
        .metrics(LossMetric())
        .num_epochs(epochs)
        .hparams({"lr": lr})
        .with_default_checkpointers()
        .with_metric_logger(pruning)
        .renderer(CliMetricsRenderer(io.StringIO()))  # quiet: the sweep prints its own lines
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=lr)))
    )
    return pruning.result()  # raises optuna.TrialPruned for a pruned trial


def main(argv: list[str] | None = None) -> Any:
    """Run the sweep; print its trials, the comparison, and where the plot went."""
    import optuna

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/sweep"))
    args = parser.parse_args(argv)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        sampler=optuna.samplers.TPESampler(seed=7),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
    )
    study.optimize(lambda trial: objective(trial, args.dir, args.epochs), n_trials=args.trials)
    for trial in study.trials:
        print(f"trial {trial.number}: {trial.state.name:8} {trial.params} value={trial.value}")
    print(f"best: trial {study.best_trial.number} {study.best_params}")

    runs = ember.runs.load([str(args.dir / "trial-*")])
    print(ember.runs.compare(runs))
    try:
        print(f"wrote {ember.runs.plot(runs, args.dir / 'sweep.png')}")
    except ImportError as error:  # matplotlib is optional
        print(error)
    return study


if __name__ == "__main__":
    main()
