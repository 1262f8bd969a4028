"""Character and word error rates: edit distance over token ids, at corpus level.

Both compare predicted token sequences ``[B, S]`` with target sequences ``[B, S']``: the rate is
``100 * sum(edit distances) / sum(target lengths)`` (insertions, deletions and substitutions
count one each). CER's tokens are characters, WER's are words; the computation is the same. With
a ``pad_token``, a sequence ends at its first pad token (in predictions and targets alike).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ember._checks import check_optional_int
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.ratio import RatioMetric

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    IntArray = npt.NDArray[np.int64]

__all__ = ["CerInput", "CharErrorRate", "WerInput", "WordErrorRate", "edit_distances"]


@dataclass(frozen=True, slots=True)
class CerInput:
    """Predicted token ids ``[B, S]`` and target token ids ``[B, S']`` (one character a token)."""

    outputs: torch.Tensor
    targets: torch.Tensor


@dataclass(frozen=True, slots=True)
class WerInput:
    """Predicted token ids ``[B, S]`` and target token ids ``[B, S']`` (one word a token)."""

    outputs: torch.Tensor
    targets: torch.Tensor


def edit_distances(
    hypotheses: IntArray, references: IntArray, hyp_lengths: IntArray, ref_lengths: IntArray
) -> IntArray:
    """The Levenshtein distance of each row's hypothesis prefix to its reference prefix.

    Row ``b`` compares ``hypotheses[b, :hyp_lengths[b]]`` with ``references[b, :ref_lengths[b]]``.
    The dynamic program runs one reference position at a time over the whole batch; within a
    row, the insertion chain ``D[i, j] = min_k (T[k] + j - k)`` is a running minimum, so each
    step is a few array operations instead of a loop over hypothesis positions.
    """
    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    batch, width = hypotheses.shape
    columns = np.arange(width + 1, dtype=np.int64)
    previous = np.broadcast_to(columns, (batch, width + 1)).copy()  # D[0, j] = j
    result = np.where(ref_lengths == 0, hyp_lengths, 0).astype(np.int64)
    step = np.empty_like(previous)
    for i in range(int(ref_lengths.max(initial=0))):
        cost = hypotheses != references[:, i : i + 1]
        step[:, 0] = i + 1
        np.minimum(previous[:, :-1] + cost, previous[:, 1:] + 1, out=step[:, 1:])
        previous = np.minimum.accumulate(step - columns, axis=1) + columns
        done = ref_lengths == i + 1
        if done.any():
            result[done] = previous[done, hyp_lengths[done]]
    return result


def _lengths(tokens: IntArray, pad_token: int | None) -> IntArray:
    import numpy as np  # lazy: keeps `import ember` fast ("light import")

    width = tokens.shape[1]
    if pad_token is None:
        return np.full(tokens.shape[0], width, dtype=np.int64)
    pad = tokens == pad_token
    lengths: IntArray = np.where(pad.any(axis=1), pad.argmax(axis=1), width).astype(np.int64)
    return lengths


class _ErrorRate(RatioMetric):
    unit = "%"
    higher_is_better = False

    def __init__(self, pad_token: int | None = None) -> None:
        pad_token = check_optional_int("pad_token", pad_token)
        super().__init__()
        self.pad_token = pad_token

    def ratio(self, numerator: float, denominator: float) -> float:
        """``100 * edits / target tokens``; without target tokens, 0 if no edits, else inf."""
        if denominator:
            return 100.0 * numerator / denominator
        return 0.0 if numerator == 0 else math.inf

    def update(self, item: CerInput | WerInput, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch's edit distances and target lengths."""
        outputs, targets = item.outputs.detach(), item.targets.detach()
        if outputs.dim() != 2 or targets.dim() != 2 or outputs.shape[0] != targets.shape[0]:
            raise ValueError(
                f"{self.name} needs outputs [B, S] and targets [B, S'], got "
                f"{tuple(outputs.shape)} and {tuple(targets.shape)}"
            )
        width = outputs.shape[1]
        # one read-back for both
        both = torch.cat([outputs.long(), targets.long()], dim=1).cpu().numpy()
        hypotheses, references = both[:, :width], both[:, width:]
        ref_lengths = _lengths(references, self.pad_token)
        distances = edit_distances(
            hypotheses, references, _lengths(hypotheses, self.pad_token), ref_lengths
        )
        return self._record(float(distances.sum()), float(ref_lengths.sum()))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(pad_token={self.pad_token})"


class CharErrorRate(_ErrorRate):
    """``CER``: the character error rate in percent (lower is better), weighted by target length.

    Reads :class:`CerInput`. The epoch value is the corpus rate: all edits over all target
    characters of the epoch.
    """

    metric_name = "CER"

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`CerInput`."""
        return CerInput


class WordErrorRate(_ErrorRate):
    """``WER``: the word error rate in percent (lower is better), weighted by target length.

    Reads :class:`WerInput`, whose token ids are words. The epoch value is the corpus rate.
    """

    metric_name = "WER"

    @property
    def input_type(self) -> type[Any]:
        """Reads :class:`WerInput`."""
        return WerInput
