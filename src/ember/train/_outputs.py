"""Built-in model outputs and the metric inputs they feed.

An output's ``sync()`` runs on the metrics thread: it detaches the tensors from the autograd
graph so the graph can be freed, and reads nothing back to the host (metrics do that when they
need a number). Each output registers the metric inputs it adapts to (see
:func:`ember.train._metric.base.adapt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

import torch
import torch.nn.functional as F

from ember.train._metric.accuracy import AccuracyInput
from ember.train._metric.base import register_adaptor
from ember.train._metric.confusion import ConfusionStatsInput
from ember.train._metric.error_rate import CerInput, WerInput
from ember.train._metric.hamming import HammingScoreInput
from ember.train._metric.loss import LossInput
from ember.train._metric.perplexity import PerplexityInput
from ember.train._metric.top_k import TopKAccuracyInput

__all__ = [
    "ClassificationOutput",
    "DetachOnSync",
    "ItemLazy",
    "MultiLabelClassificationOutput",
    "RegressionOutput",
    "SequenceOutput",
]


@runtime_checkable
class ItemLazy(Protocol):
    """An output that must be prepared on the metrics thread before metrics read it."""

    def sync(self) -> Self:
        """Detach from the graph; never read values back to the host."""
        ...


class DetachOnSync:
    """``sync()`` for output dataclasses: tensors that no metric computation can attach a graph to.

    Tensors that require grad are detached — except where autograd is off, as on ember's
    metrics thread: nothing computed there records a graph, so the output is returned as it is.
    Each ``detach`` is a torch call, and a torch call on the metrics thread hands the GIL to
    the training thread and back; a small model pays for that in its step time.
    """

    __slots__ = ()

    def sync(self) -> Self:
        """The output with every tensor that requires grad detached (see the class doc)."""
        if not torch.is_grad_enabled():
            return self
        names: tuple[str, ...] = self.__slots__  # a slots dataclass: its fields, in order
        values = [getattr(self, name) for name in names]
        if not any(isinstance(v, torch.Tensor) and v.requires_grad for v in values):
            return self
        return type(self)(
            *(v.detach() if isinstance(v, torch.Tensor) and v.requires_grad else v for v in values)
        )


@dataclass(frozen=True, slots=True)
class RegressionOutput(DetachOnSync):
    """A regression step's output: ``loss`` (reduced), ``output`` and ``targets`` ``[B, T]``."""

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor


@dataclass(frozen=True, slots=True)
class ClassificationOutput(DetachOnSync):
    """A classification step's output: ``loss``, class scores ``[B, C]``, targets ``[B]``."""

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor


@dataclass(frozen=True, slots=True)
class MultiLabelClassificationOutput(DetachOnSync):
    """A multi-label step's output: ``loss``, scores ``[B, C]``, 0/1 integer targets ``[B, C]``."""

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor


@dataclass(frozen=True, slots=True)
class SequenceOutput(DetachOnSync):
    """A sequence step's output: ``loss``, ``logits`` ``[B, S, V]``, integer ``targets`` ``[B, S]``.

    ``predictions`` ``[B, S]`` are the decoded token ids when the model decodes differently
    from ``argmax(logits)`` (beam search, say); CER and WER read them if given.
    """

    loss: torch.Tensor
    logits: torch.Tensor
    targets: torch.Tensor
    predictions: torch.Tensor | None = None


@register_adaptor(RegressionOutput, LossInput)
def _regression_loss(output: RegressionOutput) -> LossInput:
    return LossInput(output.loss)


@register_adaptor(ClassificationOutput, LossInput)
def _classification_loss(output: ClassificationOutput) -> LossInput:
    return LossInput(output.loss)


@register_adaptor(ClassificationOutput, AccuracyInput)
def _classification_accuracy(output: ClassificationOutput) -> AccuracyInput:
    return AccuracyInput(output.output, output.targets)


@register_adaptor(ClassificationOutput, TopKAccuracyInput)
def _classification_top_k(output: ClassificationOutput) -> TopKAccuracyInput:
    return TopKAccuracyInput(output.output, output.targets)


@register_adaptor(ClassificationOutput, PerplexityInput)
def _classification_perplexity(output: ClassificationOutput) -> PerplexityInput:
    return PerplexityInput(output.output, output.targets)


@register_adaptor(ClassificationOutput, ConfusionStatsInput)
def _classification_confusion(output: ClassificationOutput) -> ConfusionStatsInput:
    classes = output.output.shape[1]
    targets = (
        F.one_hot(output.targets.long(), classes).bool()
        if classes > 1
        else output.targets.unsqueeze(1).bool()
    )
    return ConfusionStatsInput(output.output, targets)


@register_adaptor(MultiLabelClassificationOutput, LossInput)
def _multilabel_loss(output: MultiLabelClassificationOutput) -> LossInput:
    return LossInput(output.loss)


@register_adaptor(MultiLabelClassificationOutput, HammingScoreInput)
def _multilabel_hamming(output: MultiLabelClassificationOutput) -> HammingScoreInput:
    return HammingScoreInput(output.output, output.targets)


@register_adaptor(MultiLabelClassificationOutput, ConfusionStatsInput)
def _multilabel_confusion(output: MultiLabelClassificationOutput) -> ConfusionStatsInput:
    return ConfusionStatsInput(output.output, output.targets.bool())


def _decoded(output: SequenceOutput) -> torch.Tensor:
    """The predicted token ids ``[B, S]``: ``predictions``, else ``argmax(logits)``."""
    return output.predictions if output.predictions is not None else output.logits.argmax(dim=2)


def _flat_logits(output: SequenceOutput) -> torch.Tensor:
    """Logits as ``[B*S, V]``, one row a token."""
    return output.logits.reshape(-1, output.logits.shape[-1])


@register_adaptor(SequenceOutput, LossInput)
def _sequence_loss(output: SequenceOutput) -> LossInput:
    return LossInput(output.loss)


@register_adaptor(SequenceOutput, CerInput)
def _sequence_cer(output: SequenceOutput) -> CerInput:
    return CerInput(_decoded(output), output.targets)


@register_adaptor(SequenceOutput, WerInput)
def _sequence_wer(output: SequenceOutput) -> WerInput:
    return WerInput(_decoded(output), output.targets)


@register_adaptor(SequenceOutput, AccuracyInput)
def _sequence_accuracy(output: SequenceOutput) -> AccuracyInput:
    return AccuracyInput(_flat_logits(output), output.targets.reshape(-1))


@register_adaptor(SequenceOutput, TopKAccuracyInput)
def _sequence_top_k(output: SequenceOutput) -> TopKAccuracyInput:
    return TopKAccuracyInput(_flat_logits(output), output.targets.reshape(-1))


@register_adaptor(SequenceOutput, PerplexityInput)
def _sequence_perplexity(output: SequenceOutput) -> PerplexityInput:
    return PerplexityInput(_flat_logits(output), output.targets.reshape(-1))
