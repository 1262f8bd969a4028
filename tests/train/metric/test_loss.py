"""``Loss``: an epoch's value is the mean per item, as a hand loop computes it."""

from __future__ import annotations

import copy
import io
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.extend import LossInput
from ember.train import (
    CliMetricsRenderer,
    EvaluatorBuilder,
    Learner,
    LossMetric,
    LossOutput,
    SupervisedTraining,
    ValueMetric,
    current_step,
)
from ember.train._metric.base import MetricMetadata
from tests.train.fixtures import read_lines

META = MetricMetadata(None, 1, None)  # type: ignore[arg-type]  # the loss reads no progress


def data(count: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 3, generator=generator)
    y = x.sum(1, keepdim=True) + 0.1 * torch.randn(count, 1, generator=generator)
    return list(zip(x, y, strict=True))


def hand_epoch(
    model: nn.Module, items: list[tuple[torch.Tensor, torch.Tensor]], optim: torch.optim.Optimizer
) -> float:
    """A hand loop's epoch loss over batches of 32: ``sum(loss * n) / N`` in float64; with
    ``optim`` it trains as it goes."""
    total = 0.0
    for start in range(0, len(items), 32):
        x = torch.stack([x for x, _ in items[start : start + 32]])
        y = torch.stack([y for _, y in items[start : start + 32]])
        loss = F.mse_loss(model(x), y)
        if model.training:
            optim.zero_grad()
            torch.autograd.backward(loss)
            optim.step()
        total += loss.item() * len(x)
    return total / len(items)


def test_an_epoch_of_200_items_in_batches_of_32_is_the_per_item_mean(tmp_path: Path) -> None:
    """200 items in batches of 32: the short last batch of 8 weighs 8, on train, valid and the
    Evaluator, as a hand loop's sum(loss * n) / N."""
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    hand = copy.deepcopy(model)
    train, valid = data(200, 1), data(200, 2)
    loader = DataLoaderBuilder().batch_size(32)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), loss=F.mse_loss)
    result = (
        SupervisedTraining(
            tmp_path / "run",
            loader.build(InMemDataset(train)),
            loader.build(InMemDataset(valid)),
        )
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(1)
        .launch(learner)
    )
    assert result.error is None
    lines = read_lines(tmp_path / "run" / "train" / "epoch-1" / "Loss.log")
    assert [line.split(",")[1] for line in lines[:-1]] == ["32"] * 6 + ["8"]
    optim = torch.optim.SGD(hand.parameters(), lr=0.05)
    expected_train = hand_epoch(hand.train(), train, optim)
    with torch.no_grad():
        expected_valid = hand_epoch(hand.eval(), valid, optim)
    assert result.values("train", "Loss")[1] == pytest.approx(expected_train, rel=1e-12)
    assert result.values("valid", "Loss")[1] == pytest.approx(expected_valid, rel=1e-12)
    evaluator = (
        EvaluatorBuilder(tmp_path / "eval")
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .build(model, step=learner.inference_step)
    )
    summary = evaluator.eval("test", loader.build(InMemDataset(valid)))
    assert summary.value("Loss") == pytest.approx(expected_valid, rel=1e-12)


def test_a_value_a_step_logs_weighs_its_batch_items_as_the_loss(tmp_path: Path) -> None:
    """A loss's term logged with current_step().log is averaged as Loss is: per item."""

    def loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        value = F.mse_loss(output, target)
        context = current_step()
        assert context is not None
        context.log("Term", value)
        return value

    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    result = (
        SupervisedTraining(
            tmp_path, DataLoaderBuilder().batch_size(32).build(InMemDataset(data(200, 1))), None
        )
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), ValueMetric("Term"))
        .num_epochs(1)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), loss=loss))
    )
    assert result.error is None
    assert result.values("train", "Term") == result.values("train", "Loss")


@given(st.lists(st.tuples(st.floats(0, 1e4), st.integers(1, 64)), min_size=1, max_size=8))
def test_the_epoch_value_is_the_mean_over_the_items(batches: list[tuple[float, int]]) -> None:
    """Whatever the batch means and sizes: the epoch value is sum(mean * n) / sum(n)."""
    metric = LossMetric()
    for value, count in batches:
        entry = metric.update(
            LossInput(torch.tensor(value, dtype=torch.float64), items=count), META
        )
        assert entry.serialized.endswith(f",{count}")
    metric.compute()
    expected = sum(v * n for v, n in batches) / sum(n for _, n in batches)
    assert metric.final_value().value == pytest.approx(expected, rel=1e-12)


def test_an_output_that_does_not_say_its_items_weighs_1() -> None:
    """LossOutput(loss) without items: the batch weighs 1 (ember cannot tell its items)."""
    metric = LossMetric()
    for value in (1.0, 4.0):
        entry = metric.update(LossInput(torch.tensor(value)), META)
        assert entry.serialized.endswith(",1")
    metric.compute()
    assert metric.final_value().value == 2.5
    assert LossOutput(torch.tensor(1.0)).items is None


def test_an_epoch_begun_by_ember_0_2_goes_on_weighing_batches_1() -> None:
    """A 0.2 mid-round state (no "weights"): its epoch ends as 0.2 would have logged it, each
    batch weighing 1; the next epoch weighs items."""
    metric = LossMetric()
    metric.load_state_dict({"mean": {"sum": 3.0, "count": 2, "current": 2.0, "current_count": 1}})
    assert metric.update(LossInput(torch.tensor(6.0), items=32), META).serialized == "6,1"
    metric.compute()
    assert metric.final_value().value == 3.0
    metric.clear()
    assert metric.update(LossInput(torch.tensor(6.0), items=32), META).serialized == "6,32"
    assert metric.state_dict()["weights"] == "items"
