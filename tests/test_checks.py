"""Every public integer argument takes any ``numbers.Integral`` but ``bool`` and refuses floats
and strings, with one message shape (``ember/_checks.py``)."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ember.data import DataLoaderBuilder, InMemDataset, ShuffledDataset
from ember.distributed import spawn
from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    LinearLr,
    NoamLr,
    StepLr,
    StoppingCondition,
    SupervisedTraining,
    TopKAccuracyMetric,
)
from tests.train.fixtures import loader

_TRAINING = SupervisedTraining(Path("unused-run"), loader(4), loader(4)).renderer(
    CliMetricsRenderer(io.StringIO())
)


def _builder() -> DataLoaderBuilder[Any, Any]:
    return DataLoaderBuilder(lambda items, device: items)


SETTERS: dict[str, tuple[str, Callable[[Any], object]]] = {
    "DataLoaderBuilder.batch_size": ("batch_size", lambda v: _builder().batch_size(v)),
    "DataLoaderBuilder.num_workers": ("num_workers", lambda v: _builder().num_workers(v)),
    "DataLoaderBuilder.shuffle": ("seed", lambda v: _builder().shuffle(v)),
    "ShuffledDataset": ("seed", lambda v: ShuffledDataset(InMemDataset([1, 2, 3]), v)),
    "SupervisedTraining.num_epochs": ("num_epochs", _TRAINING.num_epochs),
    "SupervisedTraining.max_steps": ("max_steps", _TRAINING.max_steps),
    "SupervisedTraining.grads_accumulation": ("grads_accumulation", _TRAINING.grads_accumulation),
    "SupervisedTraining.checkpoint": ("epoch", _TRAINING.checkpoint),
    "KeepLastNCheckpoints": ("n (checkpoints to keep)", KeepLastNCheckpoints),
    "TopKAccuracyMetric": ("k", TopKAccuracyMetric),
    "StoppingCondition": ("n_epochs", StoppingCondition.no_improvement_since),
    "LinearLr": ("num_iters", lambda v: LinearLr(0.1, 0.01, v)),
    "StepLr": ("step_size", lambda v: StepLr(0.1, v)),
    "NoamLr": ("warmup_steps", lambda v: NoamLr(1.0, warmup_steps=v)),
}
INTEGERS = [2, np.int64(2), np.int32(2), np.uint8(2), torch.tensor(2).item()]
NOT_INTEGERS = [True, False, 2.0, np.float64(2.0), "2", None, torch.tensor(2)]


@given(st.sampled_from(sorted(SETTERS)), st.sampled_from(range(len(INTEGERS))))
def test_any_integral_is_accepted(setter: str, index: int) -> None:
    _, call = SETTERS[setter]
    call(INTEGERS[index])


@given(st.sampled_from(sorted(SETTERS)), st.sampled_from(range(len(NOT_INTEGERS))))
def test_bools_floats_and_strings_are_refused_with_one_message(setter: str, index: int) -> None:
    name, call = SETTERS[setter]
    value = NOT_INTEGERS[index]
    with pytest.raises(TypeError) as info:
        call(value)
    assert str(info.value) == f"{name} must be an int, got {value!r} ({type(value).__name__})"


@pytest.mark.parametrize("value", NOT_INTEGERS)
def test_spawn_world_size_is_checked_before_any_process_starts(value: object) -> None:
    with pytest.raises(TypeError, match=r"^world_size must be an int, got "):
        spawn(print, value)  # type: ignore[arg-type]


def test_supervised_training_without_a_directory_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match=r"^directory must be a str or a path .*got None"):
        SupervisedTraining(None, loader(4), loader(4))  # type: ignore[arg-type]
