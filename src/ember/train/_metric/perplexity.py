"""Perplexity of a language model: exp of the mean negative log-likelihood per token."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ember._checks import check_optional_int
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.ratio import RatioMetric

__all__ = ["PerplexityInput", "PerplexityMetric"]


@dataclass(frozen=True, slots=True)
class PerplexityInput:
    """Logits ``[T, V]`` and integer targets ``[T]`` (sequences flattened to tokens).

    Tokens whose target is ``ignore_index`` (a causal LM's ``-100``) are left out, as the
    model's own loss leaves them out.
    """

    outputs: torch.Tensor
    targets: torch.Tensor
    ignore_index: int | None = None


class PerplexityMetric(RatioMetric):
    """``Perplexity``: ``exp(sum(nll) / tokens)``, at corpus level over the epoch.

    A batch logs its own perplexity weighted by its token count; the epoch value is
    ``exp(sum of all nll / all tokens)``, not a mean of batch perplexities. Tokens whose target
    is ``pad_token`` are left out. No tokens give ``inf``.
    """

    metric_name = "Perplexity"

    def __init__(self, pad_token: int | None = None) -> None:
        pad_token = check_optional_int("pad_token", pad_token)
        super().__init__()
        self.pad_token = pad_token

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`PerplexityInput`."""
        return PerplexityInput

    def ratio(self, numerator: float, denominator: float) -> float:
        """``exp(nll / tokens)``; ``inf`` without tokens."""
        if not denominator:
            return math.inf
        try:
            return math.exp(numerator / denominator)
        except OverflowError:
            return math.inf

    def update(self, item: PerplexityInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch's summed negative log-likelihood and token count."""
        logits, targets = item.outputs.detach(), item.targets.detach()
        if logits.dim() != 2 or targets.dim() != 1 or logits.shape[0] != targets.shape[0]:
            raise ValueError(
                "PerplexityMetric needs outputs [T, V] and targets [T], got "
                f"{tuple(logits.shape)} and {tuple(targets.shape)}"
            )
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()  # log-softmax sums lose too much in half precision
        targets = targets.long()
        ignored = item.ignore_index if item.ignore_index is not None else self.pad_token
        if ignored is None:
            nll = F.cross_entropy(logits, targets, reduction="sum")
            return self._record(nll.item(), targets.numel())
        if self.pad_token is not None and self.pad_token != ignored:
            targets = targets.masked_fill(targets == self.pad_token, ignored)
        # the same call as a model's own mean loss, summed: the same tokens, the same order
        nll = F.cross_entropy(logits, targets, reduction="sum", ignore_index=ignored)
        tokens = (targets != ignored).sum()
        # one read-back for both numbers
        total, count = torch.stack([nll.double(), tokens.double()]).tolist()
        return self._record(total, count)

    def __repr__(self) -> str:
        return f"PerplexityMetric(pad_token={self.pad_token})"
