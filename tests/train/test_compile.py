"""torch.compile: the model compiled in place, no recompilation after the first epoch, and
checkpoint keys free of torch.compile's ``_orig_mod``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from ember.train._checkpoint.record import load_model_record, model_record
from tests.train.fixtures import TinyRegressor, loader, weight

dynamo = pytest.importorskip("torch._dynamo")


def test_compile_compiles_the_steps_and_recompiles_nothing_after_epoch_1(tmp_path: Path) -> None:
    """.compile() makes train_step's and inference_step's self(...) calls run compiled; the
    tail batch's shape is compiled in epoch 1 and nothing is compiled after it."""
    dynamo.reset()
    counters = dynamo.utils.counters
    counters.clear()
    torch.manual_seed(0)
    model = TinyRegressor()
    frames: list[int] = []

    class Count(CliMetricsRenderer):
        def update_epoch(self, epoch: int) -> None:
            frames.append(counters["stats"]["unique_graphs"])
            super().update_epoch(epoch)

    result = (
        SupervisedTraining(tmp_path, loader(10, 4), loader(6, 4))
        .renderer(Count(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(3)
        .compile(backend="eager")
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    assert frames[0] > 0
    assert frames == [frames[0]] * 3


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own, on CPU
def test_a_compiled_wrapper_is_refused_with_what_to_do() -> None:
    """Learner(torch.compile(model)) would train uncompiled: refused, naming the fix."""
    model = TinyRegressor()
    with pytest.raises(TypeError, match=r"compile it in place with SupervisedTraining\(\.\.\.\)"):
        Learner(torch.compile(model), torch.optim.SGD(model.parameters()), 0.1)  # type: ignore[type-var]  # refused


def test_checkpoint_keys_never_hold_orig_mod() -> None:
    """A model with a torch.compile'd submodule checkpoints under the plain names, and its
    record loads into an uncompiled model and back."""
    torch.manual_seed(0)
    plain = TinyRegressor()
    compiled = TinyRegressor()
    compiled.linear = torch.compile(compiled.linear, backend="eager")  # type: ignore[assignment]
    record = model_record(compiled)
    assert sorted(record.tensors) == ["linear.bias", "linear.weight"]
    load_model_record(plain, record)
    assert torch.equal(weight(plain), weight(compiled))
    load_model_record(compiled, model_record(TinyRegressor()))


def test_unknown_compile_options_are_refused_at_the_call(tmp_path: Path) -> None:
    """An option torch.compile does not take is named at the call, with the ones it takes."""
    builder = SupervisedTraining(tmp_path, loader(4), loader(4))
    with pytest.raises(TypeError, match=r"does not take: \['bakend'\]; it takes .*'backend'"):
        builder.compile(bakend="eager")
