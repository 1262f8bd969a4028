"""The step context in every step: values logged in ``train_step``, ``optimize`` and
``inference_step`` reach a ``ValueMetric``, and an inference step knows its split and batch
index (validation, an evaluation, ``predict``); the GAN of examples/dcgan logs its generator
loss from ``optimize``, equal to a raw loop."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ember.train import (
    CliMetricsRenderer,
    EvaluatorBuilder,
    GradientsParams,
    Learner,
    LossMetric,
    RegressionOutput,
    StepContext,
    SupervisedTraining,
    ValueMetric,
    current_step,
    predict,
)
from tests.train.fixtures import Batch, TinyRegressor, loader, read_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class Logging(TinyRegressor):
    """Logs the batch's mean target in train_step and inference_step, and the parameters'
    norm after the update in optimize; remembers every context of an inference step."""

    def __init__(self) -> None:
        super().__init__()
        self.contexts: list[StepContext] = []

    def train_step(self, batch: Batch) -> Any:
        context = current_step()
        assert context is not None
        context.log("Target", batch.y.mean())
        return super().train_step(batch)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        context = current_step()
        assert context is not None
        self.contexts.append(context)
        context.log("Target", batch.y.mean())
        return super().inference_step(batch)

    def optimize(self, optim: torch.optim.Optimizer, lr: float, grads: GradientsParams) -> None:
        super().optimize(optim, lr, grads)
        context = current_step()
        assert context is not None
        context.log("Norm", torch.cat([p.detach().flatten() for p in self.parameters()]).norm())


def test_values_logged_in_any_step_reach_value_metrics(tmp_path: Path) -> None:
    """train_step's and optimize's values on the train split, inference_step's on the valid
    split, one line per batch weighted by its items, read on the metrics thread; a batch that
    logs nothing under a name (validation has no optimize) logs no line there."""
    torch.manual_seed(0)
    model = Logging()
    result = (
        SupervisedTraining(tmp_path, loader(12, 4), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), ValueMetric("Target"))
        .metric_train_numeric(ValueMetric("Norm"))
        .num_epochs(1)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1)))
    )
    assert result.error is None, result.traceback
    train = list(loader(12, 4))
    expected = [f"{float(b.y.mean())!r},4" for b in train]
    assert read_lines(tmp_path / "train" / "epoch-1" / "Target.log")[:-1] == expected
    valid = [f"{float(b.y.mean())!r},4" for b in loader(8, 4)]
    assert read_lines(tmp_path / "valid" / "epoch-1" / "Target.log")[:-1] == valid
    norm = torch.cat([p.detach().flatten() for p in model.parameters()]).norm()
    assert read_lines(tmp_path / "train" / "epoch-1" / "Norm.log")[-2] == f"{float(norm)!r},4"
    assert not (tmp_path / "valid" / "epoch-1" / "Norm.log").exists()


def test_an_inference_step_knows_its_split_and_batch_index(tmp_path: Path) -> None:
    """Validation: split "valid", the epoch and its batches from 1; an evaluation: the test's
    name and epoch 0; predict: "predict"."""
    torch.manual_seed(0)
    model = Logging()
    result = (
        SupervisedTraining(tmp_path, loader(8, 4), loader(8, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1)))
    )
    assert result.error is None, result.traceback
    seen = [(c.split, c.epoch, c.iteration, c.optimizer_steps) for c in model.contexts]
    assert seen == [("valid", 1, 1, 2), ("valid", 1, 2, 2), ("valid", 2, 1, 4), ("valid", 2, 2, 4)]
    model.contexts.clear()
    evaluator = (
        EvaluatorBuilder(tmp_path / "eval")
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .build(model)
    )
    evaluator.eval("hard", loader(12, 4))
    predict(model, loader(4, 4))
    tested = [(c.split, c.epoch, c.iteration) for c in model.contexts]
    assert tested == [("hard", 0, 1), ("hard", 0, 2), ("hard", 0, 3), ("predict", 0, 1)]
    assert all(c.batch is not None for c in model.contexts)


def test_log_takes_one_number_named() -> None:
    """A tensor of several values, a name that is not one, or a value that is not a number:
    refused at the call, naming what to give."""
    context = StepContext(1, 1, 0, None)
    with pytest.raises(ValueError, match=r"takes one number, got a tensor of shape \(3,\)"):
        context.log("x", torch.ones(3))
    with pytest.raises(TypeError, match="non-empty metric name"):
        context.log("", 1.0)
    with pytest.raises(TypeError, match="takes a number or a one-element tensor, got str"):
        context.log("x", "1")  # type: ignore[arg-type]
    context.log("x", torch.ones(1, requires_grad=True) * 2)
    assert context.values is not None and not context.values["x"].requires_grad


@pytest.fixture
def dcgan(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    return importlib.import_module("dcgan")


def test_the_gan_logs_its_generator_loss_from_optimize_as_a_raw_loop(
    dcgan: ModuleType, tmp_path: Path
) -> None:
    """examples/dcgan: both optimizers step as in a raw loop (the same weights, bit for bit),
    Loss is the discriminator's loss and "Generator Loss" the loss optimize computed, per
    batch."""
    result = dcgan.main(["--epochs", "1", "--dir", str(tmp_path)])
    assert result.error is None, result.traceback
    torch.manual_seed(0)
    raw = dcgan.Gan()
    optimizers = {
        "generator": torch.optim.Adam(raw.generator.parameters(), lr=2e-3, betas=(0.5, 0.999)),
        "discriminator": torch.optim.Adam(
            raw.discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999)
        ),
    }
    losses, generator_losses = [], []
    for step, real in enumerate(dcgan.loader(1024, 1)):
        raw.zero_grad(set_to_none=True)
        loss, _ = raw.discriminator_loss(real)
        torch.autograd.backward(loss)
        optimizers["discriminator"].step()
        raw.zero_grad(set_to_none=True)
        fake = raw.generator(torch.randn(len(real), dcgan.NOISE))
        generator_loss = F.binary_cross_entropy_with_logits(
            raw.discriminator(fake), torch.ones(len(real), 1)
        )
        torch.autograd.backward(generator_loss)
        optimizers["generator"].step()
        if step % raw.sample_every == 0:  # the example keeps a few generated points
            torch.randn(4, dcgan.NOISE)
        losses.append(f"{loss.item()!r},1")
        generator_losses.append(f"{generator_loss.item()!r},1")
    train = tmp_path / "train" / "epoch-1"
    assert read_lines(train / "Loss.log")[:-1] == losses
    assert read_lines(train / "Generator_Loss.log")[:-1] == generator_losses
    for ours, theirs in zip(
        result.model.state_dict().values(), raw.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs)
