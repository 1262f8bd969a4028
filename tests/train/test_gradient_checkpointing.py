"""Gradient checkpointing: same losses and gradients, less kept for backward, undone after."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LossMetric,
    MultiDevice,
    RegressionOutput,
    SingleDevice,
    SupervisedLearningStrategy,
    SupervisedTraining,
    TrainOutput,
)
from ember.train._gradient_checkpointing import (
    GradientCheckpointing,
    apply_gradient_checkpointing,
    checkpointed,
    checkpointed_modules,
)
from tests.train.fixtures import Batch, loader, read_lines


class Deep(LearnerModel):
    """Three blocks, optionally with dropout, so checkpointing has activations to drop."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.inp = nn.Linear(3, 16)
        self.body = nn.Sequential(
            nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Dropout(dropout)),
            nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Dropout(dropout)),
        )
        self.out = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.out(self.body(torch.tanh(self.inp(x))))
        return out

    def regression(self, batch: Batch) -> RegressionOutput:
        out = self(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y), out, batch.y)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        return self.regression(batch)


def plain(model: nn.Module) -> bool:
    """No module of ``model`` has an instance-level forward any more."""
    return not any("forward" in vars(module) for module in model.modules())


def step_grads(
    model: Deep, batch: Batch, seed: int
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(seed)
    model.train()
    output = model.train_step(batch)
    return output.item.loss.detach(), dict(output.grads)


def saved_for_backward(model: nn.Module, x: torch.Tensor) -> int:
    """How many tensors the autograd graph of one forward keeps."""
    count = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        model(x).sum()
    return count


@pytest.mark.parametrize("dropout", [0.0, 0.5])
@pytest.mark.parametrize("modules", [None, ["body.0", "body.1"], ["body", "out"]])
def test_same_losses_and_gradients(dropout: float, modules: list[str] | None) -> None:
    """Checkpointed or not, a train step gives bit-identical losses and gradients (dropout
    masks are replayed in the recomputation) and leaves the RNG in the same state."""
    torch.manual_seed(0)
    model = Deep(dropout)
    batch = next(iter(loader(16, 8)))
    loss, grads = step_grads(model, batch, seed=7)
    after_plain = torch.random.get_rng_state()
    with apply_gradient_checkpointing(model, modules) as handle:
        assert handle.active and not plain(model)
        loss_ckpt, grads_ckpt = step_grads(model, batch, seed=7)
        after_ckpt = torch.random.get_rng_state()
    assert plain(model) and not handle.active
    assert torch.equal(loss, loss_ckpt)
    assert grads.keys() == grads_ckpt.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], grads_ckpt[name], rtol=0, atol=1e-6, msg=name)
    assert torch.equal(after_plain, after_ckpt)


def test_activations_are_not_kept() -> None:
    """The checkpointed blocks keep only their inputs for backward."""
    torch.manual_seed(0)
    model = Deep()
    x = torch.randn(4, 3)
    before = saved_for_backward(model, x)
    with apply_gradient_checkpointing(model, ["body"]):
        during = saved_for_backward(model, x)
    assert during < before
    assert saved_for_backward(model, x) == before


def test_inference_runs_the_plain_forward() -> None:
    """Under inference_mode the original forward runs (nothing to recompute)."""
    torch.manual_seed(0)
    model = Deep().eval()
    x = torch.randn(4, 3)
    expected = model(x)
    with apply_gradient_checkpointing(model), torch.inference_mode():
        assert torch.equal(model(x), expected)


def test_default_is_the_direct_children() -> None:
    """Without names, the model's direct children are checkpointed."""
    model = Deep()
    assert checkpointed_modules(model) == ("inp", "body", "out")
    with apply_gradient_checkpointing(model) as handle:
        assert handle.modules == ("inp", "body", "out")
        assert all("forward" in vars(child) for child in model.children())
        assert "forward" not in vars(model.body[0])
        assert repr(handle) == "GradientCheckpointing(modules=('inp', 'body', 'out'), active=True)"


def test_unknown_names_raise_before_any_change() -> None:
    """Unknown dotted names give a ValueError naming each of them; nothing is wrapped."""
    model = Deep()
    with pytest.raises(ValueError, match=r"'body\.7', 'head'.*direct children: inp, body, out"):
        apply_gradient_checkpointing(model, ["body.0", "body.7", "head"])
    assert plain(model)


@pytest.mark.parametrize(
    ("modules", "error", "match"),
    [
        ("body", TypeError, "sequence of dotted submodule names"),
        ([], ValueError, "at least one submodule"),
        (["body", ""], ValueError, "non-empty dotted names"),
        (["body", "body"], ValueError, "more than once: body"),
    ],
)
def test_bad_module_lists_raise_at_the_builder(
    tmp_path: Path, modules: Any, error: type[Exception], match: str
) -> None:
    """The builder checks the list at the call."""
    builder = SupervisedTraining(tmp_path, loader(8), loader(8))
    with pytest.raises(error, match=match):
        builder.gradient_checkpointing(modules)


def test_unknown_names_raise_at_launch(tmp_path: Path) -> None:
    """Names are checked against the model when launch gets it, before training starts."""
    model = Deep()
    builder = SupervisedTraining(tmp_path / "run", loader(8), loader(8)).gradient_checkpointing(
        ["body.0", "nope"]
    )
    with pytest.raises(ValueError, match="no submodule 'nope'"):
        builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert not (tmp_path / "run").exists()


def test_a_model_without_children_needs_names() -> None:
    """With no children to default to, the error says to name the modules."""
    with pytest.raises(ValueError, match="no child modules"):
        checkpointed_modules(nn.Linear(2, 2))


def test_shared_module_is_wrapped_once_and_nesting_undoes_in_order() -> None:
    """A module under two names is wrapped once; stacked handles undo in reverse order."""
    model = Deep()
    model.alias = model.out
    outer = apply_gradient_checkpointing(model, ["out", "alias"])
    inner = apply_gradient_checkpointing(model, ["out"])
    with pytest.raises(RuntimeError, match="reverse order"):
        outer.remove()
    inner.remove()
    outer.remove()
    outer.remove()  # idempotent
    assert plain(model)


def test_deepcopy_of_a_checkpointed_model_runs_its_own_forward() -> None:
    """copy.deepcopy rebinds the wrapped forward to the copy (replicas are independent)."""
    torch.manual_seed(0)
    model = Deep()
    with apply_gradient_checkpointing(model, ["out"]):
        twin = copy.deepcopy(model)
    with torch.no_grad():
        twin.out.weight.zero_()
        twin.out.bias.fill_(3.0)
    out = twin(torch.randn(2, 3, requires_grad=True))
    assert torch.equal(out, torch.full((2, 1), 3.0))
    assert plain(model)


def test_checkpointed_with_none_changes_nothing() -> None:
    """The strategies' helper is a no-op when the setting is off."""
    model = Deep()
    with checkpointed(None, model):
        assert plain(model)
    with checkpointed(("out",), model, Deep()):
        assert not plain(model)
    assert plain(model)


def run(
    directory: Path,
    strategy: SupervisedLearningStrategy,
    dropout: float,
    modules: list[str] | bool | None,
) -> tuple[Deep, Any]:
    torch.manual_seed(0)
    model = Deep(dropout)
    builder = (
        SupervisedTraining(directory, loader(24, 4, shuffle=1), loader(8, 4, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(2)
        .with_training_strategy(strategy)
    )
    if modules is not False:
        assert modules is None or isinstance(modules, list)
        builder = builder.gradient_checkpointing(modules)
    seen: list[bool] = []
    model.register_forward_pre_hook(lambda module, args: seen.append(not plain(model)))
    result = builder.launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    assert result.error is None, result.traceback
    assert result.model is model and plain(model)
    assert seen and all(seen) == (modules is not False)
    return model, result


@pytest.mark.parametrize(
    ("strategy", "dropout"),
    [
        (SingleDevice("cpu"), 0.3),
        (MultiDevice(["cpu", "cpu"]), 0.0),  # CPU replicas share one generator: no dropout
    ],
    ids=["single-dropout", "multi"],
)
@pytest.mark.parametrize("modules", [None, ["body.1"]], ids=["children", "named"])
def test_training_with_checkpointing_equals_training_without(
    tmp_path: Path, strategy: SupervisedLearningStrategy, dropout: float, modules: list[str] | None
) -> None:
    """Through launch, checkpointed training logs the same losses and ends with the same
    weights; the model comes back plain."""
    plain_model, _ = run(tmp_path / "plain", strategy, dropout, False)
    ckpt_model, _ = run(tmp_path / "ckpt", strategy, dropout, modules)
    for (name, a), (_, b) in zip(
        plain_model.state_dict().items(), ckpt_model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    for split in ("train", "valid"):
        for epoch in (1, 2):
            path = Path(split) / f"epoch-{epoch}" / "Loss.log"
            expected = [float(x.split(",")[0]) for x in read_lines(tmp_path / "plain" / path)]
            got = [float(x.split(",")[0]) for x in read_lines(tmp_path / "ckpt" / path)]
            assert got == pytest.approx(expected, rel=1e-6, abs=1e-7)


def test_handle_type_is_exported() -> None:
    """The handle is what apply_gradient_checkpointing returns."""
    with apply_gradient_checkpointing(Deep(), ["out"]) as handle:
        assert isinstance(handle, GradientCheckpointing)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_same_losses_and_gradients_on_cuda_with_dropout() -> None:
    """On CUDA the recomputation replays the CUDA generator's dropout masks too."""
    torch.manual_seed(0)
    model = Deep(0.5).cuda()
    batch = Batch(torch.randn(64, 3, device="cuda"), torch.randn(64, 1, device="cuda"))
    loss, grads = step_grads(model, batch, seed=3)
    with apply_gradient_checkpointing(model):
        loss_ckpt, grads_ckpt = step_grads(model, batch, seed=3)
    assert torch.equal(loss, loss_ckpt)
    for name in grads:
        torch.testing.assert_close(grads[name], grads_ckpt[name], rtol=0, atol=1e-6, msg=name)
