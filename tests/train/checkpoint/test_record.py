"""Records: snapshots of models, optimizers, JSON state and RNG states that round-trip exactly."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch import nn

from ember._errors import CheckpointError
from ember.extend import Record
from ember.train import FileCheckpointer
from ember.train._checkpoint.record import (
    decode,
    encode,
    load_model_record,
    load_nested_record,
    load_optimizer_record,
    model_record,
    nested_record,
    optimizer_record,
    state_record,
)
from ember.train._checkpoint.rng import rng_state, set_rng_state


def mlp(seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def train_steps(model: nn.Module, optim: torch.optim.Optimizer, steps: int, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(16, 4, generator=generator)
        y = torch.randn(16, 1, generator=generator)
        optim.zero_grad()
        torch.autograd.backward(nn.functional.mse_loss(model(x), y))
        optim.step()


def through_file(tmp_path: Path, record: Record, name: str = "r") -> Record:
    """``record`` after a save and a restore."""
    checkpointer = FileCheckpointer(tmp_path, name)
    written = checkpointer.save(1, record)
    return checkpointer.restore(1, written)


def same(a: Any, b: Any) -> bool:
    """Deep equality with exact types; tensors equal in dtype, shape and bits; NaN equals NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


OPTIMIZERS: dict[str, Callable[[Iterator[nn.Parameter]], torch.optim.Optimizer]] = {
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9, nesterov=True),
    "adamw_amsgrad": lambda params: torch.optim.AdamW(params, lr=1e-2, amsgrad=True),
}


@pytest.mark.parametrize("kind", list(OPTIMIZERS))
def test_resumed_training_is_bit_identical(tmp_path: Path, kind: str) -> None:
    """A model and optimizer restored from files continue exactly like the uninterrupted ones."""
    model = mlp()
    optim = OPTIMIZERS[kind](model.parameters())
    train_steps(model, optim, 3, seed=1)
    saved_model = through_file(tmp_path, model_record(model), "model")
    saved_optim = through_file(tmp_path, optimizer_record(optim), "optim")

    resumed = mlp(seed=99)
    resumed_optim = OPTIMIZERS[kind](resumed.parameters())
    load_model_record(resumed, saved_model)
    load_optimizer_record(resumed_optim, saved_optim)
    assert same(resumed_optim.state_dict(), optim.state_dict())

    train_steps(model, optim, 4, seed=2)
    train_steps(resumed, resumed_optim, 4, seed=2)
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_optimizer_with_two_groups_and_tensor_lr(tmp_path: Path) -> None:
    """Several param groups, and a tensor lr inside a group, round-trip."""
    model = mlp()
    groups: list[dict[str, Any]] = [
        {"params": model[0].parameters(), "lr": torch.tensor(0.01)},
        {"params": model[2].parameters(), "lr": 0.02, "weight_decay": 0.1},
    ]
    optim = torch.optim.Adam(groups)
    train_steps(model, optim, 2, seed=3)
    restored = through_file(tmp_path, optimizer_record(optim))
    other_groups: list[dict[str, Any]] = [
        {"params": model[0].parameters(), "lr": torch.tensor(0.5)},
        {"params": model[2].parameters()},
    ]
    other = torch.optim.Adam(other_groups)
    load_optimizer_record(other, restored)
    assert same(other.state_dict(), optim.state_dict())


def test_optimizer_record_is_a_snapshot() -> None:
    """The record does not change when the optimizer steps on."""
    model = mlp()
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_steps(model, optim, 1, seed=0)
    record = optimizer_record(optim)
    copy = {k: v.clone() for k, v in record.tensors.items()}
    train_steps(model, optim, 2, seed=0)
    assert all(torch.equal(record.tensors[k], v) for k, v in copy.items())
    assert sorted(record.tensors) == [f"state.{i}.momentum_buffer" for i in range(4)]


def test_model_record_is_a_cpu_snapshot() -> None:
    """Changing the weights in place after model_record does not change the record."""
    model = mlp()
    record = model_record(model)
    before = {k: v.clone() for k, v in record.tensors.items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    assert all(torch.equal(record.tensors[k], v) for k, v in before.items())
    assert all(t.device.type == "cpu" and t.is_contiguous() for t in record.tensors.values())
    assert not any(t.requires_grad for t in record.tensors.values())


def test_model_shape_mismatch_names_the_parameter() -> None:
    """Loading into another shape raises CheckpointError with the name and both shapes."""
    record = model_record(mlp())
    other = nn.Sequential(nn.Linear(4, 9), nn.ReLU(), nn.Linear(9, 1))
    before = [p.clone() for p in other.parameters()]
    with pytest.raises(CheckpointError, match=r"'0\.weight'.*\(8, 4\).*\(9, 4\)"):
        load_model_record(other, record)
    assert all(torch.equal(a, b) for a, b in zip(before, other.parameters(), strict=True))


def test_model_dtype_and_key_mismatch() -> None:
    """A dtype that differs, or missing and unexpected names, raise CheckpointError."""
    record = model_record(mlp())
    with pytest.raises(CheckpointError, match=r"'0\.weight'.*float32.*float64"):
        load_model_record(mlp().double(), record)
    with pytest.raises(CheckpointError, match=r"missing \['3\.weight', '3\.bias'\]"):
        load_model_record(nn.Sequential(*mlp(), nn.Linear(1, 1)), record)
    with pytest.raises(CheckpointError, match=r"unexpected \['2\.weight', '2\.bias'\]"):
        load_model_record(nn.Sequential(nn.Linear(4, 8)), record)


class WithExtras(nn.Module):
    """Tied weights, a non-contiguous buffer and extra state with a tensor and a tuple."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.b.weight = self.a.weight
        self.register_buffer("t", torch.arange(12.0).reshape(3, 4).t())
        self.extra: dict[str, Any] = {"k": (1, 2), "v": torch.ones(2)}

    def get_extra_state(self) -> Any:
        return self.extra

    def set_extra_state(self, state: Any) -> None:
        self.extra = state


def test_model_with_tied_weights_views_and_extra_state(tmp_path: Path) -> None:
    """safetensors' limits (shared, non-contiguous tensors) and extra state are handled."""
    model = WithExtras()
    restored = through_file(tmp_path, model_record(model))
    target = WithExtras()
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
    target.extra = {}
    load_model_record(target, restored)
    assert same(target.state_dict(), model.state_dict())
    assert same(target.extra, model.extra)


def test_optimizer_mismatch_raises_with_details() -> None:
    """Another parameter count, group count or shape raises CheckpointError."""
    model = mlp()
    optim = torch.optim.Adam(model.parameters())
    train_steps(model, optim, 1, seed=0)
    record = optimizer_record(optim)
    wider = nn.Sequential(nn.Linear(4, 9), nn.ReLU(), nn.Linear(9, 1))
    with pytest.raises(CheckpointError, match=r"parameter 0 .*\(8, 4\).*\(9, 4\)"):
        load_optimizer_record(torch.optim.Adam(wider.parameters()), record)
    with pytest.raises(CheckpointError, match="4 parameters in group 0, the optimizer has 2"):
        load_optimizer_record(torch.optim.Adam(model[0].parameters()), record)
    two_groups = torch.optim.Adam(
        [{"params": model[0].parameters()}, {"params": model[2].parameters()}]
    )
    with pytest.raises(CheckpointError, match="1 parameter groups, the optimizer has 2"):
        load_optimizer_record(two_groups, record)


def test_state_record_is_a_json_copy(tmp_path: Path) -> None:
    """state_record deep-copies plain JSON and it comes back equal."""
    state: dict[str, Any] = {
        "epoch": 3,
        "lr": 0.1,
        "inf": math.inf,
        "nested": {"a": [1, None, True, "x"]},
    }
    record = state_record(state)
    state["nested"]["a"].append(5)
    assert record.metadata["nested"]["a"] == [1, None, True, "x"]
    assert same(through_file(tmp_path, record).metadata, record.metadata)
    assert record.tensors == {}


@pytest.mark.parametrize(
    ("state", "path"),
    [({"a": (1, 2)}, "state.a"), ({"a": {1: 2}}, "state.a"), ({"a": [object()]}, "state.a.0")],
)
def test_state_record_rejects_non_json(state: dict[str, Any], path: str) -> None:
    """Tuples, non-str keys and other objects raise TypeError naming where they are."""
    with pytest.raises(TypeError, match=path.replace(".", r"\.")):
        state_record(state)


def test_nested_record_round_trips_scheduler_and_loader_states(tmp_path: Path) -> None:
    """nested_record keeps tuples, int keys and tensors: a torch scheduler's and a generator's
    state come back equal and typed alike."""
    optim = torch.optim.SGD(mlp().parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optim, max_lr=1.0, total_steps=10)
    for _ in range(3):
        optim.step()
        scheduler.step()
    generator = torch.Generator().manual_seed(7)
    value = {
        "scheduler": scheduler.state_dict(),
        "loader": {"generator": generator.get_state(), "position": (2, 5), 3: [None]},
    }
    restored = load_nested_record(through_file(tmp_path, nested_record(value)))
    assert same(restored, value)
    with pytest.raises(TypeError, match=r"value\.bad"):
        nested_record({"bad": object()})
    with pytest.raises(CheckpointError, match="nested_record"):
        load_nested_record(Record())


def test_record_validates_its_fields() -> None:
    """Records hold str→Tensor and a dict."""
    with pytest.raises(TypeError):
        Record(tensors={"a": 1})  # type: ignore[dict-item]  # invalid on purpose
    with pytest.raises(TypeError):
        Record(metadata=[])  # type: ignore[arg-type]  # invalid on purpose


scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
tensors_st = st.builds(
    lambda shape, dtype: torch.arange(math.prod(shape)).reshape(shape).to(dtype),
    st.lists(st.integers(0, 3), max_size=3),
    st.sampled_from([torch.float32, torch.float64, torch.int64, torch.bool, torch.bfloat16]),
)
keys = st.text(max_size=4) | st.integers(-3, 3)
values = st.recursive(
    scalars | tensors_st,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(keys, inner, max_size=3)
    ),
    max_leaves=10,
)


@settings(max_examples=80, deadline=None)
@given(value=st.dictionaries(st.text(max_size=4), values, max_size=4))
@example(value={"d": {1: torch.ones(1), "1": torch.zeros(2), "$x": (1, 2.5)}})
def test_codec_round_trips_exactly(value: dict[str, Any]) -> None:
    """encode → JSON text → decode gives equal values of the same types and tensors bit for bit."""
    stored: dict[str, torch.Tensor] = {}
    document = json.loads(json.dumps(encode(value, "", stored)))
    assert same(decode(document, stored, "test"), value)


def draw_all() -> list[Any]:
    return [
        torch.rand(3).tolist(),
        torch.randn(2).tolist(),
        np.random.rand(3).tolist(),
        np.random.randn(1).tolist(),
        random.random(),
        random.gauss(0.0, 1.0),
    ]


def test_rng_state_round_trip_through_a_file(tmp_path: Path) -> None:
    """Restoring a saved RNG state reproduces the next numbers of torch, numpy and python."""
    original = rng_state()
    try:
        np.random.randn(1)  # leaves a cached gaussian in numpy's state
        random.gauss(0.0, 1.0)  # and in python's
        saved = rng_state()
        restored = through_file(tmp_path, state_record({"rng": saved})).metadata["rng"]
        expected = draw_all()
        draw_all()
        set_rng_state(restored)
        assert draw_all() == expected
    finally:
        set_rng_state(original)


def test_set_rng_state_rejects_malformed_state() -> None:
    """A damaged RNG state raises CheckpointError and leaves the generators alone."""
    state = rng_state()
    before = torch.get_rng_state()
    with pytest.raises(CheckpointError, match="RNG"):
        set_rng_state({**state, "numpy": {**state["numpy"], "keys": "AAAA"}})
    with pytest.raises(CheckpointError, match="RNG"):
        set_rng_state({k: v for k, v in state.items() if k != "python"})
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_model_round_trip(tmp_path: Path) -> None:
    """A CUDA model is snapshotted to CPU and loaded back onto its device."""
    model = mlp().cuda()
    record = model_record(model)
    assert all(t.device.type == "cpu" for t in record.tensors.values())
    target = mlp(seed=5).cuda()
    load_model_record(target, through_file(tmp_path, record))
    assert all(p.is_cuda for p in target.parameters())
    assert same(target.state_dict(), model.state_dict())
