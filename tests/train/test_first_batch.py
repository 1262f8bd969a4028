"""Protocol mistakes a new user makes, each named at the first batch with the line to write
(issue 12, item 6), and the torch DataLoader a PyTorch user already has, taken as it is."""

from __future__ import annotations

import importlib
import io
import re
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from ember.data import DataLoaderBuilder, InMemDataset, TorchDataLoader
from ember.train import (
    AccuracyMetric,
    CliMetricsRenderer,
    Learner,
    LossMetric,
    RegressionOutput,
    SingleDevice,
    SupervisedTraining,
    TrainOutput,
)
from tests.train.fixtures import Batch, TinyRegressor, loader, quiet, samples


def training_error(training: SupervisedTraining, model: TinyRegressor) -> BaseException:
    """The error that ended the run: the result's, or the one ``launch`` raised (with what it
    chains to)."""
    learner = Learner(model, partial(torch.optim.SGD, lr=0.1))
    try:
        result = training.launch(learner)
    except Exception as raised:  # a launch that raises the run's error wraps it
        return raised.__cause__ or raised
    assert result.error is not None, "the run should have failed"
    return result.error


class ReturnsItsOutput(TinyRegressor):
    """Forgot TrainOutput: returns the output object the metrics read."""

    def train_step(self, batch: Batch) -> Any:
        return self.regression(batch)


class ReturnsTheLoss(TinyRegressor):
    """The Lightning habit: returns the loss."""

    def train_step(self, batch: Batch) -> Any:
        return self.regression(batch).loss


class UnreducedLoss(TinyRegressor):
    """A criterion with reduction='none': one loss per item."""

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        out = self(batch.x)
        loss = F.mse_loss(out, batch.y, reduction="none")
        return TrainOutput.from_loss(self, loss, RegressionOutput(loss.mean(), out, batch.y))


def test_forgetting_train_output_says_what_to_return(tmp_path: Path) -> None:
    error = training_error(quiet(tmp_path, loader(8), loader(4)), ReturnsItsOutput())
    assert isinstance(error, TypeError)
    assert str(error) == (
        "ReturnsItsOutput.train_step returned RegressionOutput, not a TrainOutput: wrap it, "
        "running the backward pass: `return TrainOutput.from_loss(self, output.loss, output)`"
    )


def test_returning_the_loss_says_what_to_return(tmp_path: Path) -> None:
    error = training_error(quiet(tmp_path, loader(8), loader(4)), ReturnsTheLoss())
    assert isinstance(error, TypeError)
    message = str(error)
    assert message.startswith(
        "ReturnsTheLoss.train_step returned a Tensor of shape () (the loss?), not a TrainOutput"
    )
    assert "`return TrainOutput.from_loss(self, loss, output)`" in message


def test_a_loss_per_item_says_how_to_reduce_it(tmp_path: Path) -> None:
    error = training_error(quiet(tmp_path, loader(8), loader(4)), UnreducedLoss())
    assert isinstance(error, ValueError)
    assert str(error).startswith("loss has shape (4, 1), not a scalar")
    assert "`loss = loss.mean()`" in str(error)
    assert isinstance(error.__cause__, RuntimeError)  # torch's own words stay attached


def test_a_batcher_ignoring_its_device_is_named(tmp_path: Path) -> None:
    """The model is on another device than the batch: the batcher made CPU tensors although
    the loader asked for the training device (the meta device stands in for a GPU)."""

    def cpu_only(items: list[tuple[list[float], float]], device: torch.device) -> Batch:
        return Batch(torch.tensor([x for x, _ in items]), torch.tensor([[y] for _, y in items]))

    train = DataLoaderBuilder(cpu_only).batch_size(4).build(InMemDataset(samples(8)))
    training = quiet(tmp_path, train, loader(4)).with_training_strategy(SingleDevice("meta"))
    error = training_error(training, TinyRegressor())
    assert isinstance(error, ValueError)
    assert str(error).startswith(
        "the batch has tensors on cpu but the model TinyRegressor is on meta: "
    )
    assert "batch(items, device)" in str(error)


def test_a_metric_the_output_cannot_feed_is_named_with_the_outputs_that_can(
    tmp_path: Path,
) -> None:
    training = quiet(tmp_path, loader(8), loader(4)).metric_train_numeric(AccuracyMetric())
    error = training_error(training, TinyRegressor())
    assert isinstance(error, TypeError)
    assert str(error).startswith(
        "the train metric 'Accuracy' (AccuracyMetric) cannot read the model's output: "
        "RegressionOutput cannot feed a metric that reads AccuracyInput: return one that does "
        "(CausalLMOutput, ClassificationOutput, SequenceOutput), "
    )
    assert "register_adaptor(RegressionOutput, AccuracyInput)" in str(error)


def test_the_function_a_wrong_output_s_message_names_exists(tmp_path: Path) -> None:
    """Issue 29, item 10: the message said ember.train.register_adaptor, which is not there;
    the module and function it names now import."""
    training = quiet(tmp_path, loader(8), loader(4)).metric_train_numeric(AccuracyMetric())
    error = training_error(training, TinyRegressor())
    named = re.search(r"(ember(?:\.\w+)*)\.(register_adaptor)\(", str(error))
    assert named is not None, str(error)
    assert callable(getattr(importlib.import_module(named.group(1)), named.group(2)))


def test_a_torch_dataloader_is_taken_as_it_is(tmp_path: Path) -> None:
    """The loader a PyTorch user already has trains, wrapped in a TorchDataLoader, as the
    train, valid and test loader; the losses are those of the same batches by hand."""
    x = torch.randn(12, 3, generator=torch.Generator().manual_seed(0))
    y = x.sum(dim=1, keepdim=True)

    def torch_loader() -> TorchLoader[Any]:
        return TorchLoader(TensorDataset(x, y), batch_size=4)

    class PairRegressor(TinyRegressor):
        def train_step(self, batch: Any) -> TrainOutput[RegressionOutput]:
            return super().train_step(Batch(*batch))

        def inference_step(self, batch: Any) -> RegressionOutput:
            return super().inference_step(Batch(*batch))

    training = (
        SupervisedTraining(tmp_path, torch_loader(), torch_loader())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_test("test", torch_loader(), checkpoint=None)
    )
    assert isinstance(training.config.train, TorchDataLoader)
    assert isinstance(training.config.valid, TorchDataLoader)
    model = PairRegressor()
    hand = PairRegressor()
    hand.load_state_dict(model.state_dict())
    result = training.launch(Learner(model, partial(torch.optim.SGD, lr=0.1)))
    assert result.error is None
    optimizer = torch.optim.SGD(hand.parameters(), lr=0.1)
    expected = []
    for batch_x, batch_y in torch_loader():
        loss = F.mse_loss(hand(batch_x), batch_y)
        optimizer.zero_grad()
        torch.autograd.backward(loss)
        optimizer.step()
        expected.append(loss.item())
    logged = (tmp_path / "train" / "epoch-1" / "Loss.log").read_text().splitlines()
    assert [float(line.split(",")[0]) for line in logged[:-1]] == pytest.approx(expected)
    assert result.evaluation is not None


def test_a_loader_that_is_neither_names_what_it_lacks(tmp_path: Path) -> None:
    """An object that is neither a loader, a dataset nor a list: the members it lacks."""
    with pytest.raises(TypeError, match=r"the train loader int lacks .*ember.extend.DataLoader"):
        SupervisedTraining(tmp_path, 3, loader(4))  # type: ignore[arg-type]
