"""The experiment ``ember.cli`` resolved reaches every run ``main`` launches: in its thread, in
the threads and processes it starts, and no run after ``main`` returned."""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
from pathlib import Path

import pytest

from ember.train._experiment import (
    ENVIRONMENT,
    Experiment,
    current_experiment,
    running_experiment,
)
from tests.train.fixtures import loader, quiet

EXPERIMENT = Experiment({"lr": 0.1, "data": {"batch_size": 4}}, "lr: 0.1\ndata:\n  batch_size: 4\n")


def launch_tiny_run(directory: str) -> None:
    """One epoch of the tiny regressor (a process's target: importable, no closure)."""
    import torch

    from ember.train import Learner
    from tests.train.fixtures import TinyRegressor

    model = TinyRegressor()
    quiet(Path(directory), loader(4), loader(4)).launch(
        Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    )


def recorded(directory: Path) -> object:
    return json.loads((directory / "config.json").read_text(encoding="utf-8"))["cli"]


@pytest.mark.slow
def test_a_thread_and_a_spawned_process_of_main_record_the_experiment(tmp_path: Path) -> None:
    """A run launched on a thread main started, or in a process it spawned (as
    ember.distributed.spawn's ranks are), records the experiment as the main thread's does."""
    with running_experiment(EXPERIMENT):
        thread = threading.Thread(target=launch_tiny_run, args=(str(tmp_path / "thread"),))
        thread.start()
        thread.join()
        process = multiprocessing.get_context("spawn").Process(
            target=launch_tiny_run, args=(str(tmp_path / "process"),)
        )
        process.start()
        process.join(timeout=120)
    assert process.exitcode == 0
    for run in ("thread", "process"):
        assert recorded(tmp_path / run) == EXPERIMENT.values
        assert (tmp_path / run / "config.yaml").read_text(encoding="utf-8") == EXPERIMENT.yaml


def test_the_experiment_ends_with_main_and_an_outer_one_comes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Nested experiments restore the outer one, and nothing is left set afterwards."""
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    inner = Experiment({"lr": 0.2}, "lr: 0.2\n")
    with running_experiment(EXPERIMENT):
        with running_experiment(inner):
            assert current_experiment() == inner
        assert current_experiment() == EXPERIMENT
        assert json.loads(os.environ[ENVIRONMENT])["values"] == EXPERIMENT.values
    assert current_experiment() is None and ENVIRONMENT not in os.environ


def test_a_damaged_environment_variable_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """A value ember.cli did not write is refused at launch with the variable named."""
    monkeypatch.setenv(ENVIRONMENT, "lr=0.1")
    with pytest.raises(ValueError, match=f"{ENVIRONMENT}.*'lr=0.1'.*unset it"):
        current_experiment()
