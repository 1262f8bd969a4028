"""TrainingOptions: every option against the builder call it stands for; seed; with_options."""

from __future__ import annotations

import dataclasses
import io
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from ember.train import (
    CliMetricsRenderer,
    DistributedDataParallel,
    EarlyStoppingOptions,
    Every,
    FullyShardedDataParallel,
    Learner,
    Limits,
    LossMetric,
    MetricEarlyStoppingStrategy,
    StoppingCondition,
    SupervisedTraining,
    TrainingOptions,
)
from tests.train.fixtures import TinyRegressor, loader

TRAIN, VALID, LOSS = loader(16, 4), loader(8, 4), LossMetric()


def builder(directory: Path) -> SupervisedTraining:
    """A builder over the same loaders and metric each time (what differs is the options')."""
    return SupervisedTraining(directory, TRAIN, VALID).metrics(LOSS)


def same(a: Any, b: Any) -> bool:
    """Equal values, or objects of one class holding equal values (two strategies made alike)."""
    if a == b:
        return True
    if type(a) is not type(b) or not hasattr(a, "__dict__"):
        return False
    return all(same(x, y) for x, y in zip(vars(a).values(), vars(b).values(), strict=True))


def assert_same_config(ours: SupervisedTraining, theirs: SupervisedTraining) -> None:
    for field in dataclasses.fields(ours.config):
        if field.name == "interrupter":  # each builder has its own
            continue
        mine, expected = getattr(ours.config, field.name), getattr(theirs.config, field.name)
        assert same(mine, expected), f"{field.name}: {mine!r} != {expected!r}"


CASES: list[tuple[dict[str, Any], Any]] = [
    ({"num_epochs": 5}, lambda b: b.num_epochs(5)),
    ({"max_steps": 40}, lambda b: b.max_steps(40)),
    ({"validate_every": Every(steps=3)}, lambda b: b.validate_every(steps=3)),
    ({"checkpoint_every": Every(seconds=60.0)}, lambda b: b.checkpoint_every(seconds=60.0)),
    ({"grads_accumulation": 4}, lambda b: b.grads_accumulation(4)),
    (
        {"grads_accumulation": 4, "grads_accumulation_mean": True},
        lambda b: b.grads_accumulation(4, mean=True),
    ),
    ({"precision": "bf16-mixed"}, lambda b: b.precision("bf16-mixed")),
    ({"clip_grad_norm": 1.0}, lambda b: b.clip_grad_norm(1.0)),
    ({"clip_grad_value": 0.5}, lambda b: b.clip_grad_value(0.5)),
    ({"compile": True}, lambda b: b.compile()),
    ({"strategy": "ddp"}, lambda b: b.with_training_strategy(DistributedDataParallel())),
    ({"strategy": "fsdp"}, lambda b: b.with_training_strategy(FullyShardedDataParallel())),
    ({"seed": 7}, lambda b: b.seed(7)),
    ({"default_checkpointers": True}, lambda b: b.with_default_checkpointers()),
    ({"resume_latest": True}, lambda b: b.resume_latest()),
    ({"checkpoint": 3}, lambda b: b.checkpoint(3)),
    (
        {"early_stopping": EarlyStoppingOptions("Loss", patience=3)},
        lambda b: b.early_stopping(
            MetricEarlyStoppingStrategy("Loss", condition=StoppingCondition.no_improvement_since(3))
        ),
    ),
    ({"max_time": 90.0}, lambda b: b.max_time(90.0)),
    ({"fast_dev_run": 2}, lambda b: b.fast_dev_run(2)),
    ({"limit_batches": Limits(train=3)}, lambda b: b.limit_batches(train=3)),
    ({"overfit_batches": 2}, lambda b: b.overfit_batches(2)),
    ({"summary": True}, lambda b: b.summary()),
    ({"file_logs": False}, lambda b: b.without_file_logs()),
    ({"overwrite": True}, lambda b: b.overwrite()),
    ({"versioned": True}, lambda b: b.versioned()),
    ({"errors_in_result": True}, lambda b: b.errors_in_result()),
]


@pytest.mark.parametrize(("fields", "call"), CASES, ids=[next(iter(f)) for f, _ in CASES])
def test_each_option_is_the_builder_call_it_is_named_after(
    tmp_path: Path, fields: dict[str, Any], call: Any
) -> None:
    """with_options(TrainingOptions(field=value)) configures exactly what the builder method
    does."""
    assert_same_config(
        builder(tmp_path).with_options(TrainingOptions(**fields)), call(builder(tmp_path))
    )


def test_every_option_has_a_case_and_the_defaults_change_nothing(tmp_path: Path) -> None:
    """Each field of TrainingOptions is tested above; TrainingOptions() leaves a builder as
    it was."""
    tested = {name for fields, _ in CASES for name in fields}
    assert tested == {field.name for field in dataclasses.fields(TrainingOptions)}
    assert_same_config(builder(tmp_path).with_options(TrainingOptions()), builder(tmp_path))


def test_options_are_checked_as_the_builder_checks_them(tmp_path: Path) -> None:
    """A bad value gets the builder's message; what is no TrainingOptions is refused."""
    with pytest.raises(ValueError, match="num_epochs must be >= 1"):
        builder(tmp_path).with_options(TrainingOptions(num_epochs=0))
    with pytest.raises(ValueError, match="validate_every takes steps or epochs, got seconds"):
        builder(tmp_path).with_options(TrainingOptions(validate_every=Every(seconds=3.0)))
    with pytest.raises(ValueError, match=r"early_stopping needs a metric"):
        builder(tmp_path).with_options(
            TrainingOptions(early_stopping=EarlyStoppingOptions(patience=5))
        )
    with pytest.raises(TypeError, match="with_options takes a TrainingOptions, got dict"):
        builder(tmp_path).with_options({"num_epochs": 3})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="seed must be an int"):
        builder(tmp_path).seed(-1)


class Dropped(TinyRegressor):
    """A regressor with dropout: every step draws from torch's global generator."""

    def __init__(self) -> None:
        super().__init__(nn.Sequential(nn.Linear(3, 16), nn.Dropout(0.5), nn.Linear(16, 1)))


def seeded_run(directory: Path, disturb: int, seed: int | None) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = Dropped()  # the same weights in every run
    torch.rand(disturb)  # whatever the global generators hold before launch
    random.random()
    np.random.rand(disturb)
    options = TrainingOptions(num_epochs=2, seed=seed)
    training = (
        SupervisedTraining(directory, loader(32, 4, shuffle=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_options(options)
    )
    result = training.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.01)))
    assert result.error is None, result.traceback
    return [p.detach().clone() for p in model.parameters()]


def test_two_runs_with_seed_7_are_identical_whatever_the_global_rng_held(tmp_path: Path) -> None:
    """TrainingOptions(seed=7): the dropout masks, hence the weights, are the same whatever
    the generators held before launch; without a seed they differ; config.json records it."""
    first = seeded_run(tmp_path / "a", 3, 7)
    second = seeded_run(tmp_path / "b", 11, 7)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    unseeded = seeded_run(tmp_path / "c", 11, None)
    assert not all(torch.equal(a, b) for a, b in zip(first, unseeded, strict=True))
    assert json.loads((tmp_path / "a" / "config.json").read_text())["seed"] == 7
