"""Built-in model outputs and the metric inputs they feed.

An output's ``sync()`` runs on the metrics thread: it detaches the tensors from the autograd
graph so the graph can be freed, and reads nothing back to the host (metrics do that when they
need a number). Each output registers the metric inputs it adapts to (see
:func:`ember.train.metric.base.adapt`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Self, runtime_checkable

import torch

from ember.train.metric.accuracy import AccuracyInput
from ember.train.metric.base import register_adaptor
from ember.train.metric.loss import LossInput

__all__ = ["ClassificationOutput", "ItemLazy", "RegressionOutput"]


@runtime_checkable
class ItemLazy(Protocol):
    """An output that must be prepared on the metrics thread before metrics read it."""

    def sync(self) -> Self:
        """Detach from the graph; never read values back to the host."""
        ...


@dataclass(frozen=True, slots=True)
class RegressionOutput:
    """A regression step's output: ``loss`` (reduced), ``output`` and ``targets`` ``[B, T]``."""

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor

    def sync(self) -> RegressionOutput:
        """The same output with the tensors detached from the autograd graph."""
        return type(self)(self.loss.detach(), self.output.detach(), self.targets.detach())


@dataclass(frozen=True, slots=True)
class ClassificationOutput:
    """A classification step's output: ``loss``, class scores ``[B, C]``, targets ``[B]``."""

    loss: torch.Tensor
    output: torch.Tensor
    targets: torch.Tensor

    def sync(self) -> ClassificationOutput:
        """The same output with the tensors detached from the autograd graph."""
        return type(self)(self.loss.detach(), self.output.detach(), self.targets.detach())


@register_adaptor(RegressionOutput, LossInput)
def _regression_loss(output: RegressionOutput) -> LossInput:
    return LossInput(output.loss)


@register_adaptor(ClassificationOutput, LossInput)
def _classification_loss(output: ClassificationOutput) -> LossInput:
    return LossInput(output.loss)


@register_adaptor(ClassificationOutput, AccuracyInput)
def _classification_accuracy(output: ClassificationOutput) -> AccuracyInput:
    return AccuracyInput(output.output, output.targets)
