"""The built-in outputs feed the new metrics, and the processor runs them end to end."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchmetrics.classification import MulticlassAccuracy

from ember.data import Progress
from ember.extend import (
    AccuracyInput,
    CerInput,
    ConfusionStatsInput,
    HammingScoreInput,
    LossInput,
    MetricMetadata,
    PerplexityInput,
    TopKAccuracyInput,
    WerInput,
    adapt,
)
from ember.train import (
    AccuracyMetric,
    AurocMetric,
    CharErrorRate,
    ClassificationOutput,
    CpuMemory,
    CpuUse,
    CudaMetric,
    FBetaScoreMetric,
    HammingScore,
    Metric,
    Numeric,
    PerplexityMetric,
    PrecisionMetric,
    RecallMetric,
    Split,
    TopKAccuracyMetric,
    TorchMetric,
    WordErrorRate,
)
from ember.train._metric.registered import MetricsTraining
from ember.train._outputs import MultiLabelClassificationOutput, SequenceOutput


def _graph(*shape: int) -> torch.Tensor:
    return torch.randn(shape, requires_grad=True) * 2  # a non-leaf: it has a grad_fn


def test_multilabel_output_syncs_and_adapts() -> None:
    """sync() detaches; the output feeds Loss, Hamming and confusion stats (bool targets)."""
    out = MultiLabelClassificationOutput(
        _graph(), _graph(3, 2), torch.tensor([[1, 0], [0, 1], [1, 1]])
    )
    synced = out.sync()
    assert not synced.loss.requires_grad and not synced.output.requires_grad
    assert adapt(synced, LossInput).tensor is synced.loss
    hamming = adapt(synced, HammingScoreInput)
    assert hamming.outputs is synced.output and hamming.targets is synced.targets
    stats = adapt(synced, ConfusionStatsInput)
    assert stats.targets.dtype == torch.bool and stats.targets.tolist() == [[1, 0], [0, 1], [1, 1]]


def test_sequence_output_syncs_and_adapts() -> None:
    """Tokens are flattened for accuracy-like inputs; CER/WER read predictions or argmax."""
    logits, targets = _graph(2, 3, 5), torch.randint(0, 5, (2, 3))
    out = SequenceOutput(_graph(), logits, targets)
    synced = out.sync()
    assert not synced.logits.requires_grad and synced.predictions is None
    for input_type in (AccuracyInput, TopKAccuracyInput, PerplexityInput):
        item = adapt(synced, input_type)
        assert item.outputs.shape == (6, 5) and item.targets.shape == (6,)  # type: ignore[attr-defined]
    cer = adapt(synced, CerInput)
    assert torch.equal(cer.outputs, logits.argmax(2)) and cer.targets is synced.targets
    decoded = torch.zeros(2, 4, dtype=torch.long)
    with_predictions = SequenceOutput(_graph(), logits, targets, decoded.clone()).sync()
    assert torch.equal(adapt(with_predictions, WerInput).outputs, decoded)
    assert adapt(with_predictions, LossInput).tensor is with_predictions.loss


def test_classification_output_feeds_confusion_stats() -> None:
    """Targets become one-hot for C > 1 and a column for C = 1; TopK and Perplexity inputs too."""
    out = ClassificationOutput(torch.tensor(0.5), torch.rand(3, 4), torch.tensor([0, 3, 1]))
    assert torch.equal(adapt(out, ConfusionStatsInput).targets, F.one_hot(out.targets, 4).bool())
    assert adapt(out, TopKAccuracyInput).outputs is out.output
    assert adapt(out, PerplexityInput).targets is out.targets
    binary = ClassificationOutput(torch.tensor(0.5), torch.rand(3, 1), torch.tensor([0, 1, 1]))
    assert adapt(binary, ConfusionStatsInput).targets.tolist() == [[False], [True], [True]]


def test_top_k_and_fbeta_run_through_the_processor() -> None:
    """Registered on a split, the metrics read ClassificationOutputs batch by batch; the epoch
    values are the metrics of all samples together."""
    metrics = MetricsTraining()
    for metric in (
        TopKAccuracyMetric(2),
        FBetaScoreMetric.multiclass(1.0, 1, "micro"),
        AccuracyMetric(),
    ):
        metrics.register(Split.VALID, metric)
    generator = torch.Generator().manual_seed(3)
    outputs, targets = [], []
    for step, size in enumerate((5, 3, 8), start=1):
        logits = torch.randn(size, 4, generator=generator)
        labels = torch.randint(0, 4, (size,), generator=generator)
        item = ClassificationOutput(torch.tensor(1.0), logits, labels).sync()
        states = metrics.update(Split.VALID, item, MetricMetadata(Progress(step, 3), step, None))
        assert all(state.entry.serialized.endswith(f",{size}") for state in states)
        outputs.append(logits)
        targets.append(labels)
    finals = [state.numeric.value for state in metrics.end_epoch(Split.VALID) if state.numeric]
    logits, labels = torch.cat(outputs), torch.cat(targets)
    top2 = 100 * (logits.topk(2, 1).indices == labels[:, None]).any(1).double().mean().item()
    accuracy = 100 * (logits.argmax(1) == labels).double().mean().item()
    # micro F1 of single-label top-1 predictions is the accuracy
    assert finals == pytest.approx([top2, accuracy, accuracy])


def test_sequence_metrics_run_through_the_processor() -> None:
    """CER and Perplexity read SequenceOutputs through the processor's adaptation."""
    metrics = MetricsTraining()
    metrics.register(Split.TRAIN, CharErrorRate())
    metrics.register(Split.TRAIN, PerplexityMetric())
    logits = torch.zeros(1, 2, 4)
    logits[0, 0, 1] = logits[0, 1, 2] = 10.0  # decodes to [1, 2]
    item = SequenceOutput(torch.tensor(1.0), logits, torch.tensor([[1, 3]])).sync()
    metrics.update(Split.TRAIN, item, MetricMetadata(Progress(1, 1), 1, 0.1))
    cer, ppl = metrics.end_epoch(Split.TRAIN)
    assert cer.entry.serialized == "50,final"
    assert ppl.numeric is not None and ppl.numeric.value > 1


def test_every_new_metric_is_a_metric_and_numeric_where_it_has_numbers() -> None:
    """The processor accepts them all; only Cuda and text TorchMetrics are not Numeric."""
    numeric: list[Metric] = [
        TopKAccuracyMetric(1),
        PerplexityMetric(),
        PrecisionMetric(),
        RecallMetric(),
        FBetaScoreMetric(),
        AurocMetric(),
        HammingScore(),
        CharErrorRate(),
        WordErrorRate(),
        CpuUse(),
        CpuMemory(),
        TorchMetric(MulticlassAccuracy(num_classes=2)),
    ]
    text: list[Metric] = [
        CudaMetric(),
        TorchMetric(MulticlassAccuracy(num_classes=2), numeric=False),
    ]
    assert all(isinstance(m, Numeric) for m in numeric)
    assert all(isinstance(m, Metric) and not isinstance(m, Numeric) for m in text)
    assert len({m.name for m in numeric + text}) == len(numeric) + len(text) - 1  # 2 TorchMetrics


def test_sync_returns_the_output_itself_where_autograd_is_off() -> None:
    """On a thread with autograd off (the metrics thread), sync() costs no torch call."""
    import torch as _torch

    from ember.train import RegressionOutput

    x = _torch.ones(2, 1, requires_grad=True)
    out = RegressionOutput((x * 2).sum(), x * 2, _torch.ones(2, 1))
    assert out.sync() is not out and not out.sync().loss.requires_grad
    with _torch.no_grad():
        assert out.sync() is out
