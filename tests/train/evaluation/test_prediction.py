"""Predictions equal a raw ``model.eval()`` loop bit for bit, over any loader training takes."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from ember.data import InMemDataset
from ember.train import (
    CliMetricsRenderer,
    EvaluatorBuilder,
    LossMetric,
    SupervisedTraining,
    iter_predictions,
    predict,
)
from tests.train.fixtures import Batch, TinyRegressor, loader


class Noisy(TinyRegressor):
    """Dropout and BatchNorm: eval mode and inference mode both change the output."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.Dropout(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.linear(x) + self.net(x).sum(dim=1, keepdim=True)
        return out


def raw_loop(model: nn.Module, batches: list[Batch]) -> list[torch.Tensor]:
    model.eval()
    with torch.inference_mode():
        return [model(batch.x) for batch in batches]


def test_predictions_equal_a_raw_eval_loop_bit_for_bit() -> None:
    torch.manual_seed(0)
    model = Noisy()
    model.train()
    model(torch.randn(16, 3))  # running statistics away from their initial values
    test = loader(11, 4)
    outputs = predict(model, test)
    assert model.training  # given back in its mode
    expected = raw_loop(model, list(test))
    assert len(outputs) == 3
    for output, reference in zip(outputs, expected, strict=True):
        assert output.output.device.type == "cpu"
        assert torch.equal(output.output, reference)
        assert output.output.is_inference()


def test_a_custom_step_and_streaming() -> None:
    torch.manual_seed(0)
    model = Noisy()
    test = loader(9, 4)
    streamed = list(iter_predictions(model, test, step=lambda batch: model(batch.x)))
    for output, reference in zip(streamed, raw_loop(model, list(test)), strict=True):
        assert torch.equal(output, reference)


def test_bad_input() -> None:
    with pytest.raises(TypeError, match="inference_step"):
        predict(nn.Linear(3, 1), loader(4))
    with pytest.raises(TypeError, match="DataLoader"):
        predict(TinyRegressor(), [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        predict(object(), loader(4))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="DataLoader"):
        iter_predictions(TinyRegressor(), [1, 2])  # type: ignore[arg-type]  # at the call


def test_predict_takes_the_torch_dataloader_training_and_evaluation_take(tmp_path: Path) -> None:
    """predict, iter_predictions and the Evaluator take a torch DataLoader as they are: the
    outputs of a raw eval loop over its batches, bit for bit."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    xs = torch.randn(10, 3)
    # a tensor is a map-style dataset to torch (indexable, sized): batches of rows
    torch_loader: TorchLoader[torch.Tensor] = TorchLoader(xs, batch_size=4)  # type: ignore[arg-type]
    with torch.inference_mode():
        expected = [model(x) for x in torch_loader]
    for outputs in (predict(model, torch_loader), list(iter_predictions(model, torch_loader))):
        assert len(outputs) == 3
        assert all(torch.equal(a, b) for a, b in zip(outputs, expected, strict=True))
    regressor = TinyRegressor()
    pairs = TorchLoader(TensorDataset(xs, xs.sum(1, keepdim=True)), batch_size=4)
    summary = (
        EvaluatorBuilder(tmp_path)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .build(regressor, step=lambda b: regressor.regression(Batch(b[0], b[1])))
        .eval("test", pairs)
    )
    with torch.inference_mode():
        squared = float(((regressor(xs) - xs.sum(1, keepdim=True)) ** 2).sum())
    assert summary.value("Loss") == pytest.approx(squared / 10, rel=1e-6)


def test_a_dataset_or_a_list_where_a_loader_goes_is_named_with_the_line_to_write() -> None:
    """An InMemDataset, a TensorDataset or a list of batches given to predict, training or an
    evaluation: the message says what to write (a loader built over it), not the members a
    loader has; the line for a list of batches works as written."""
    xs = torch.randn(8, 3)
    batches = [xs[:4], xs[4:]]
    dataset_fix = r"is a (InMemDataset|TensorDataset), not a loader: batch it with " + re.escape(
        "DataLoaderBuilder().batch_size(32).build(dataset)"
    )
    model = nn.Linear(3, 1)
    for dataset in (InMemDataset(list(xs)), TensorDataset(xs)):
        with pytest.raises(TypeError, match="loader " + dataset_fix):
            predict(model, dataset)  # type: ignore[arg-type]  # the mistake is the test
        with pytest.raises(TypeError, match="the train loader " + dataset_fix):
            SupervisedTraining("unused", dataset)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="loader of test 'test' " + dataset_fix):
            EvaluatorBuilder("unused").metrics(LossMetric()).build(TinyRegressor()).eval(
                "test",
                dataset,  # type: ignore[arg-type]
            )
    with pytest.raises(TypeError, match=r"loader is a list, not a loader: its 2 values") as raised:
        predict(model, batches)  # type: ignore[arg-type]
    assert "DataLoaderBuilder().batch_size(32).build(InMemDataset(items))" in str(raised.value)
    assert "torch.utils.data.DataLoader(batches, batch_size=None)" in str(raised.value)
    # a list is a map-style dataset to torch: batch_size=None yields its values as they are
    outputs = predict(model, TorchLoader(batches, batch_size=None))  # type: ignore[arg-type]
    with torch.inference_mode():
        assert all(torch.equal(o, model(b)) for o, b in zip(outputs, batches, strict=True))
