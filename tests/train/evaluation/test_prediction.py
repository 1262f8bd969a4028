"""Predictions equal a raw ``model.eval()`` loop bit for bit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ember.train import iter_predictions, predict
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
