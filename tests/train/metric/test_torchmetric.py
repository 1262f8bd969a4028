"""TorchMetric: equals AccuracyMetric, reads outputs through input_fn, text results, errors."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchmetrics.classification import MulticlassAccuracy
from torchmetrics.regression import MeanSquaredError

from ember.data import Progress
from ember.extend import AccuracyInput, MetricMetadata
from ember.train import AccuracyMetric, Numeric, RegressionOutput, TorchMetric
from ember.train._metric.torchmetric import NumericTorchMetric

META = MetricMetadata(Progress(1, 1), 1, None)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=5), st.integers(0, 2**32 - 1))
def test_wrapped_multiclass_accuracy_equals_accuracy_metric(sizes: list[int], seed: int) -> None:
    """Batch and epoch values of MulticlassAccuracy (micro) are AccuracyMetric's / 100."""
    generator = torch.Generator().manual_seed(seed)
    ours, wrapped = (
        AccuracyMetric(),
        TorchMetric(MulticlassAccuracy(num_classes=4, average="micro")),
    )
    assert isinstance(wrapped, Numeric)
    for size in sizes:
        item = AccuracyInput(
            torch.randn(size, 4, generator=generator),
            torch.randint(0, 4, (size,), generator=generator),
        )
        ours.update(item, META)
        entry = wrapped.update(item, META)
        assert entry.serialized.endswith(f",{size}")
        ours_value, wrapped_value = ours.value(), wrapped.value()
        assert ours_value is not None and wrapped_value is not None
        assert 100 * wrapped_value.value == pytest.approx(ours_value.value)
    ours.compute()
    assert wrapped.compute().serialized.endswith(",final")
    assert 100 * wrapped.final_value().value == pytest.approx(ours.final_value().value)
    wrapped.clear()
    assert wrapped.metric.update_count == 0


def test_name_and_attributes_come_from_the_torchmetrics_class() -> None:
    """The class name is the default name; higher_is_better is the class's own flag."""
    accuracy = TorchMetric(MulticlassAccuracy(num_classes=3))
    assert accuracy.name == "MulticlassAccuracy"
    assert accuracy.attributes.higher_is_better
    mse = TorchMetric(MeanSquaredError(), name="MSE", unit="m²")
    assert mse.name == "MSE" and not mse.attributes.higher_is_better
    assert mse.attributes.unit == "m²"


def test_input_fn_reads_the_model_output() -> None:
    """With input_fn the metric reads any output, here a RegressionOutput."""
    metric = TorchMetric(MeanSquaredError(), input_fn=lambda out: (out.output, out.targets))
    assert metric.input_type is object
    output = RegressionOutput(torch.tensor(0.0), torch.tensor([[1.0], [3.0]]), torch.zeros(2, 1))
    metric.update(output, META)
    assert metric.compute().serialized == "5,final"


def test_batch_values_can_be_skipped() -> None:
    """batch_values=False only updates: batches log nothing, the epoch value is the same."""
    metric = TorchMetric(MulticlassAccuracy(num_classes=2, average="micro"), batch_values=False)
    entry = metric.update(AccuracyInput(torch.eye(2), torch.tensor([0, 0])), META)
    assert not entry.is_available and metric.value() is None
    assert metric.compute().serialized == "0.5,final"


def test_non_scalar_results_are_text_when_not_numeric() -> None:
    """numeric=False logs any result as text once per epoch and is not Numeric."""
    metric = TorchMetric(MulticlassAccuracy(num_classes=2, average=None), numeric=False)
    assert type(metric) is TorchMetric and not isinstance(metric, Numeric)
    assert not metric.update(AccuracyInput(torch.eye(2), torch.tensor([0, 0])), META).is_available
    assert metric.compute().serialized == "[0.5, 0]"


def test_a_non_scalar_numeric_result_says_what_to_do() -> None:
    """A numeric TorchMetric whose compute() is not one number points to numeric=False."""
    metric = TorchMetric(MulticlassAccuracy(num_classes=2, average=None))
    with pytest.raises(ValueError, match="pass numeric=False"):
        metric.update(AccuracyInput(torch.eye(2), torch.tensor([0, 1])), META)


def test_deep_copies_are_independent() -> None:
    """The processor copies a metric registered on both splits; the copy keeps its class."""
    metric = TorchMetric(MulticlassAccuracy(num_classes=2, average="micro"))
    twin = copy.deepcopy(metric)
    assert type(twin) is NumericTorchMetric
    twin.update(AccuracyInput(torch.eye(2), torch.tensor([0, 1])), META)
    assert metric.metric.update_count == 0


def test_only_torchmetrics_metrics_are_accepted() -> None:
    """Anything else is a TypeError naming its type."""
    with pytest.raises(TypeError, match=r"must be a torchmetrics\.Metric, got AccuracyMetric"):
        TorchMetric(AccuracyMetric())  # type: ignore[call-overload]


def test_missing_torchmetrics_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torchmetrics the error names the extra to install."""
    metric = MulticlassAccuracy(num_classes=2)
    monkeypatch.setitem(sys.modules, "torchmetrics", None)
    with pytest.raises(ImportError, match=r"pip install ember\[metrics\]"):
        TorchMetric(metric)


def test_importing_ember_does_not_import_torchmetrics() -> None:
    """torchmetrics (and psutil) load only when used."""
    code = (
        "import sys, ember, ember.train, ember.train._metric, ember.train._outputs; "
        "assert 'torchmetrics' not in sys.modules and 'psutil' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
