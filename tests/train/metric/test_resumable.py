"""Every built-in metric saves its running state (``_metric/resumable.py``): a metric restored
from a state saved after batch k, through a checkpoint file, goes on exactly as the original."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from ember.data import Progress
from ember.extend import MetricMetadata, StatefulMetric
from ember.train import (
    AccuracyMetric,
    AurocMetric,
    CharErrorRate,
    ClassificationOutput,
    CpuMemory,
    CpuUse,
    CudaMetric,
    FBetaScoreMetric,
    GradNormMetric,
    HammingScore,
    IterationSpeedMetric,
    LearningRateMetric,
    LossMetric,
    MultiLabelClassificationOutput,
    PerplexityMetric,
    PrecisionMetric,
    RecallMetric,
    SequenceOutput,
    TopKAccuracyMetric,
    TorchMetric,
    WordErrorRate,
)
from ember.train._checkpoint.file import FileCheckpointer
from ember.train._checkpoint.record import Record, decode, encode
from ember.train._metric.base import Metric, adapt
from ember.train._metric.resumable import has_metric_state


class Clock:
    """A clock that moves by 0.25 s at every reading."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def classification(seed: int) -> ClassificationOutput:
    generator = torch.Generator().manual_seed(seed)
    size = 2 + seed % 4
    output = torch.randn(size, 4, generator=generator)
    targets = torch.randint(0, 4, (size,), generator=generator)
    return ClassificationOutput(torch.rand((), generator=generator), output, targets)


def multilabel(seed: int) -> MultiLabelClassificationOutput:
    generator = torch.Generator().manual_seed(seed)
    output = torch.randn(3, 5, generator=generator)
    targets = torch.randint(0, 2, (3, 5), generator=generator)
    return MultiLabelClassificationOutput(torch.rand((), generator=generator), output, targets)


def sequence(seed: int) -> SequenceOutput:
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 6, 7, generator=generator)
    targets = torch.randint(1, 7, (2, 6), generator=generator)
    return SequenceOutput(torch.rand((), generator=generator), logits, targets)


def cpu_times() -> Callable[[], tuple[float, float]]:
    counter = itertools.count()
    return lambda: (float(next(counter)), float(3 * next(counter)))


def torchmetric() -> Metric:
    from torchmetrics.classification import MulticlassAccuracy

    return TorchMetric(MulticlassAccuracy(num_classes=4, average="micro"))


# name: (the metric's factory, the model output it reads for batch i)
CASES: dict[str, tuple[Callable[[], Metric], Callable[[int], Any]]] = {
    "loss": (LossMetric, classification),
    "accuracy": (AccuracyMetric, classification),
    "top-k": (lambda: TopKAccuracyMetric(2), classification),
    "perplexity": (PerplexityMetric, classification),
    "precision": (lambda: PrecisionMetric.multiclass(top_k=1), classification),
    "recall": (lambda: RecallMetric.multilabel(), multilabel),
    "f-beta": (lambda: FBetaScoreMetric.multilabel(2.0), multilabel),
    "auroc": (AurocMetric, multilabel),
    "hamming": (HammingScore, multilabel),
    "cer": (CharErrorRate, sequence),
    "wer": (WordErrorRate, sequence),
    "lr": (LearningRateMetric, classification),
    "grad-norm": (GradNormMetric, classification),
    "speed": (lambda: IterationSpeedMetric(clock=Clock()), classification),
    "cpu": (lambda: CpuUse(cpu_times(), clock=Clock(), interval=0.0), classification),
    "memory": (lambda: CpuMemory(lambda: (2e9, 8e9), clock=Clock(), interval=0.0), classification),
    "cuda": (lambda: CudaMetric(lambda: None, clock=Clock(), interval=0.0), classification),
    "torchmetrics": (torchmetric, classification),
}


def metadata(index: int) -> MetricMetadata:
    return MetricMetadata(Progress(index + 1, 10), index + 1, 0.1 / (index + 1), torch.tensor(2.0))


def update(metric: Metric, output: Any, index: int) -> str:
    return metric.update(adapt(output, metric.input_type), metadata(index)).serialized


def through_a_file(state: dict[str, Any], directory: Path) -> dict[str, Any]:
    """``state`` written into a checkpoint file and read back (tensors and JSON, no pickle)."""
    tensors: dict[str, torch.Tensor] = {}
    record = Record(tensors=tensors, metadata={"state": encode(state, "state", tensors)})
    checkpointer = FileCheckpointer(directory, "metric")
    checkpointer.save(1, record)
    restored = checkpointer.restore(1)
    loaded: dict[str, Any] = decode(restored.metadata["state"], restored.tensors, "test")
    return loaded


@pytest.mark.parametrize("case", sorted(CASES))
@settings(max_examples=6, deadline=None)
@given(batches=st.integers(1, 6), data=st.data())
def test_a_restored_metric_goes_on_as_the_original(
    tmp_path_factory: pytest.TempPathFactory, case: str, batches: int, data: st.DataObject
) -> None:
    factory, outputs = CASES[case]
    split = data.draw(st.integers(0, batches))
    original, first = factory(), factory()
    items = [outputs(seed) for seed in range(batches)]
    expected = [update(original, item, i) for i, item in enumerate(items)]
    lines = [update(first, item, i) for i, item in enumerate(items[:split])]
    assert isinstance(first, StatefulMetric) and has_metric_state(first)
    state = through_a_file(first.state_dict(), tmp_path_factory.mktemp(case))
    resumed = factory()
    assert isinstance(resumed, StatefulMetric)
    resumed.load_state_dict(state)
    lines += [update(resumed, item, split + i) for i, item in enumerate(items[split:])]
    if case in ("speed", "cpu", "cuda"):  # values of the clock or the machine: their count
        assert len(lines) == len(expected)
    else:
        assert lines == expected
        assert resumed.compute().serialized == original.compute().serialized


def test_a_state_of_another_metric_is_refused() -> None:
    with pytest.raises(ValueError, match=r"metric 'Loss' has no 'mean' \(it has \['batches'"):
        LossMetric().load_state_dict(AccuracyMetric().state_dict())
    with pytest.raises(ValueError, match="holds sum='x', not a number"):
        LossMetric().load_state_dict({"mean": {**LossMetric().state_dict()["mean"], "sum": "x"}})


def test_a_module_metric_without_its_own_state_dict_has_no_state() -> None:
    """nn.Module's state_dict holds parameters and buffers, not the epoch's sums."""

    class ModuleMetric(nn.Module):
        name = "m"

    class ModuleMetricWithState(ModuleMetric):
        def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
            return {}

    assert not has_metric_state(ModuleMetric())
    assert has_metric_state(ModuleMetricWithState())
    assert not has_metric_state(object())
