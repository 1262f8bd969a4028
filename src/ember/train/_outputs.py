"""Built-in model outputs and the metric inputs they feed.

An output's ``sync()`` runs on the metrics thread: it detaches the tensors from the autograd
graph so the graph can be freed, and reads nothing back to the host (metrics do that when they
need a number). Each output registers the metric inputs it adapts to (see
:func:`ember.train._metric.base.adapt`).

Every output's ``summed_over`` says that its loss is a sum over that many samples
(``reduction="sum"``, a VAE's): ``Loss`` then logs the mean per sample, ``loss / summed_over``
weighted by it. Otherwise a batch's mean loss weighs the items it averages over: the first
dimension of an output's targets (labels), or a :class:`LossOutput`'s ``items``.
:class:`CausalLMOutput` holds a causal language model's logits and labels as the model's own
loss saw them: the shift and ``ignore_index`` applied exactly as ``transformers``
applies them, so ``Perplexity`` and token ``Accuracy`` count the tokens that loss counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, runtime_checkable

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
    "CausalLMOutput",
    "ClassificationOutput",
    "DetachOnSync",
    "ItemLazy",
    "LossOutput",
    "MultiLabelClassificationOutput",
    "RegressionOutput",
    "SequenceOutput",
    "leading_size",
    "synced",
]


@runtime_checkable
class ItemLazy(Protocol):
    """An output that must be prepared on the metrics thread before metrics read it."""

    def sync(self) -> Self:
        """Detach from the graph; never read values back to the host."""
        ...


_LAZY: dict[type[Any], bool] = {}  # per output type: is it an ItemLazy (checked once)


def synced(item: Any) -> Any:
    """The item after its ``sync()`` (an :class:`ItemLazy`), or itself: a runtime protocol
    check costs several microseconds, once per type here instead of once per batch."""
    kind = type(item)
    lazy = _LAZY.get(kind)
    if lazy is None:
        lazy = _LAZY[kind] = isinstance(item, ItemLazy)
    return item.sync() if lazy else item


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
class LossOutput(DetachOnSync):
    """A step's output when only its ``loss`` is known: it feeds ``Loss``.

    ``summed_over``: the loss is a sum over that many samples (see the module doc).
    ``items``: the number of items (samples) the mean loss averages over, its weight in the
    epoch's ``Loss``; None weighs the batch 1 (``Learner(model, optim, loss=...)`` fills it in).
    """

    loss: torch.Tensor
    summed_over: int | None = None
    items: int | None = None

    @classmethod
    def merge(cls, parts: Sequence[LossOutput], sizes: Sequence[int]) -> LossOutput:
        """The global batch's output from data-parallel ranks' ``parts``: a summed loss (with
        ``summed_over``) is the parts' sum, else their mean weighted by their ``sizes``, over
        the sizes' total of items."""
        total = sum(sizes)
        if parts[0].summed_over is not None:
            counts = [p.summed_over or 0 for p in parts]
            return cls(torch.stack([p.loss for p in parts]).sum(), sum(counts), total)
        weighted = [p.loss * (n / total) for p, n in zip(parts, sizes, strict=True)]
        return cls(torch.stack(weighted).sum(), items=total)

    def adapt(self, input_type: type[Any]) -> Any:
        """Nothing but ``Loss`` reads a loss alone: a metric that reads more (scores, targets)
        is refused with a TypeError naming what would feed it."""
        raise TypeError(
            f"LossOutput holds only a loss, which cannot feed a metric that reads "
            f"{input_type.__name__}. A model trained with Learner(model, optim, loss=...) "
            "gives its metrics scores and targets only with a task (task='classification', "
            "'regression', 'multilabel' or 'causal-lm'), which needs the model's output to be "
            "the scores as a tensor or an object with .logits (experiment.log says why no task "
            "was told: e.g. a forward that returns a tuple); a step of your own returns an "
            "output that holds them (e.g. ClassificationOutput(loss, scores, targets))"
        )


@dataclass(frozen=True, slots=True)
class RegressionOutput(DetachOnSync):
    """A regression step's output: ``loss`` (reduced), ``output`` and ``targets`` ``[B, T]``.

    ``summed_over``: the loss is a sum over that many samples (see the module doc).
    """

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor
    summed_over: int | None = None


@dataclass(frozen=True, slots=True)
class ClassificationOutput(DetachOnSync):
    """A classification step's output: ``loss``, class scores ``[B, C]``, targets ``[B]``.

    ``summed_over``: the loss is a sum over that many samples (see the module doc).
    """

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor
    summed_over: int | None = None


@dataclass(frozen=True, slots=True)
class MultiLabelClassificationOutput(DetachOnSync):
    """A multi-label step's output: ``loss``, scores ``[B, C]``, 0/1 integer targets ``[B, C]``.

    ``summed_over``: the loss is a sum over that many samples (see the module doc).
    """

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor
    summed_over: int | None = None


@dataclass(frozen=True, slots=True)
class SequenceOutput(DetachOnSync):
    """A sequence step's output: ``loss``, ``logits`` ``[B, S, V]``, integer ``targets`` ``[B, S]``.

    ``predictions`` ``[B, S]`` are the decoded token ids when the model decodes differently
    from ``argmax(logits)`` (beam search, say); CER and WER read them if given.
    ``summed_over``: the loss is a sum over that many samples (see the module doc).
    """

    loss: torch.Tensor
    logits: torch.Tensor
    targets: torch.Tensor
    predictions: torch.Tensor | None = None
    summed_over: int | None = None


@dataclass(frozen=True, slots=True)
class CausalLMOutput(DetachOnSync):
    """A causal language model's output: ``loss``, ``logits`` ``[B, S, V]`` and the ``labels``
    ``[B, S]`` the model was given, unshifted (a Hugging Face model's ``labels``).

    Position ``s`` predicts label ``s + 1``, and labels equal to ``ignore_index`` count for
    nothing, exactly as ``transformers`` computes a causal LM's loss: ``Perplexity`` sums the
    negative log-likelihood of the same tokens in the same order (its log is the model's loss
    to the last bit), token ``Accuracy`` and ``TopKAccuracy`` count the same tokens.
    """

    loss: torch.Tensor
    logits: torch.Tensor
    labels: torch.Tensor
    ignore_index: int = -100

    def shifted_labels(self) -> torch.Tensor:
        """The label each position predicts, flattened ``[B*S]`` (the last position of each
        sequence predicts nothing: ``ignore_index``), as ``transformers`` shifts them."""
        padded = F.pad(self.labels, (0, 1), value=self.ignore_index)
        return padded[..., 1:].reshape(-1)

    @classmethod
    def merge(cls, parts: Sequence[CausalLMOutput], sizes: Sequence[int]) -> CausalLMOutput:
        """The global batch's output from data-parallel ranks' ``parts``: the logits and labels
        joined, the loss the parts' mean weighted by their ``sizes`` (sequences)."""
        total = sum(sizes)
        loss = torch.stack([p.loss * (n / total) for p, n in zip(parts, sizes, strict=True)]).sum()
        logits = torch.cat([p.logits for p in parts])
        labels = torch.cat([p.labels for p in parts])
        return cls(loss, logits, labels, parts[0].ignore_index)


def leading_size(value: object) -> int | None:
    """The first dimension of a tensor of at least one dimension (a batch's item count), else
    None."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        return int(value.shape[0])
    return None


@register_adaptor(LossOutput, LossInput)
def _loss_only(output: LossOutput) -> LossInput:
    return LossInput(output.loss, summed_over=output.summed_over, items=output.items)


@register_adaptor(RegressionOutput, LossInput)
def _regression_loss(output: RegressionOutput) -> LossInput:
    return LossInput(output.loss, None, output.summed_over, leading_size(output.targets))


@register_adaptor(ClassificationOutput, LossInput)
def _classification_loss(output: ClassificationOutput) -> LossInput:
    return LossInput(output.loss, None, output.summed_over, leading_size(output.targets))


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
    return LossInput(output.loss, None, output.summed_over, leading_size(output.targets))


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
    return LossInput(output.loss, None, output.summed_over, leading_size(output.targets))


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


def _token_rows(output: CausalLMOutput) -> tuple[torch.Tensor, torch.Tensor]:
    """Every position's logits ``[B*S, V]`` and the label it predicts ``[B*S]``, the ignored
    ones included (as the model's own loss reads them)."""
    return output.logits.reshape(-1, output.logits.shape[-1]), output.shifted_labels()


def _counted_tokens(output: CausalLMOutput) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits and labels of the positions the loss counts (label not ``ignore_index``)."""
    logits, labels = _token_rows(output)
    counted = labels != output.ignore_index
    return logits[counted], labels[counted]


@register_adaptor(CausalLMOutput, LossInput)
def _causal_lm_loss(output: CausalLMOutput) -> LossInput:
    return LossInput(output.loss, items=leading_size(output.labels))  # sequences, as merged


@register_adaptor(CausalLMOutput, PerplexityInput)
def _causal_lm_perplexity(output: CausalLMOutput) -> PerplexityInput:
    logits, labels = _token_rows(output)
    return PerplexityInput(logits, labels, ignore_index=output.ignore_index)


@register_adaptor(CausalLMOutput, AccuracyInput)
def _causal_lm_accuracy(output: CausalLMOutput) -> AccuracyInput:
    return AccuracyInput(*_counted_tokens(output))


@register_adaptor(CausalLMOutput, TopKAccuracyInput)
def _causal_lm_top_k(output: CausalLMOutput) -> TopKAccuracyInput:
    return TopKAccuracyInput(*_counted_tokens(output))
