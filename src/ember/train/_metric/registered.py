"""The metrics registered for each split, and how one batch's output updates them.

A run of several validation sets (``train/_valid_sets.py``) validates each set after the main
one with its own deep copies of the registered valid metrics (:meth:`MetricsTraining.
add_valid_set`), so running states never mix; their entries are renamed ``Loss (noisy)``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from ember.train._metric.base import Metric, MetricMetadata, Numeric, adapt
from ember.train._metric.loss import LossInput
from ember.train._metric.values import MetricState
from ember.train._vocabulary import Split

__all__ = ["MetricsTraining", "set_metric_name"]

_Resolved = list[tuple[Metric, type[Any], bool]]
"""(metric, its input type, whether numeric): protocol checks are too slow per batch."""


def set_metric_name(metric: str, set_name: str) -> str:
    """The name the values of ``metric`` on the validation set ``set_name`` are logged under:
    ``Loss (noisy)``."""
    return f"{metric} ({set_name})"


class MetricsTraining:
    """The metrics registered for each split, updated in registration order."""

    def __init__(self) -> None:
        self._metrics: dict[Split, list[Metric]] = {split: [] for split in Split}
        self._resolved: dict[Split, _Resolved] = {split: [] for split in Split}
        self._sets: dict[str, _Resolved] = {}  # each other validation set's own copies

    def register(self, split: Split, metric: Metric) -> None:
        """Add ``metric`` to ``split``; a second metric with the same name is refused."""
        if not isinstance(metric, Metric):
            raise TypeError(
                f"metric must have name, input_type, update, compute and clear; "
                f"got {type(metric).__name__}"
            )
        names = [m.name for m in self._metrics[split]]
        if metric.name in names:
            raise ValueError(
                f"a metric named {metric.name!r} is already registered for the {split.value} "
                "split; each metric writes to the file of its name, so names must be unique"
            )
        if any(metric is m for metrics in self._metrics.values() for m in metrics):
            metric = copy.deepcopy(metric)  # one instance per split: each keeps its own state
        self._metrics[split].append(metric)
        self._resolved[split].append((metric, metric.input_type, isinstance(metric, Numeric)))

    def add_valid_set(self, name: str) -> None:
        """Validate on the set ``name`` too, with a deep copy of every valid metric registered
        so far; its entries are named ``"{metric} ({name})"``."""
        if name in self._sets:
            raise ValueError(f"the validation set {name!r} is already added")
        copies = [copy.deepcopy(metric) for metric in self._metrics[Split.VALID]]
        self._sets[name] = [(m, m.input_type, isinstance(m, Numeric)) for m in copies]

    @property
    def valid_sets(self) -> tuple[str, ...]:
        """The validation sets after the main one, in the order added."""
        return tuple(self._sets)

    def metrics(self, split: Split) -> list[Metric]:
        """The metrics of ``split`` (the main validation set's, for the valid split)."""
        return list(self._metrics[split])

    def update(
        self,
        split: Split,
        item: Any,
        metadata: MetricMetadata,
        loss: LossInput | None = None,
        valid_set: str | None = None,
    ) -> list[MetricState]:
        """Update every metric of ``split`` with one batch's output (of the validation set
        ``valid_set``'s metrics, when given).

        ``loss`` is the item's loss already read back, given to the metrics that read one.
        """
        if valid_set is not None:
            states = _updated(split, self._sets[valid_set], item, metadata, loss)
            return _renamed(states, valid_set)
        return _updated(split, self._resolved[split], item, metadata, loss)

    def end_epoch(self, split: Split) -> list[MetricState]:
        """Compute the epoch value of every metric of ``split`` (of every validation set, set
        after set, for the valid split), then clear them."""
        states = _ended(self._resolved[split])
        if split is Split.VALID:
            for name, resolved in self._sets.items():
                states += _renamed(_ended(resolved), name)
        return states


def _updated(
    split: Split, resolved: _Resolved, item: Any, metadata: MetricMetadata, loss: LossInput | None
) -> list[MetricState]:
    """Every metric of ``resolved`` updated with one batch's output; their states."""
    states = []
    for metric, input_type, numeric in resolved:
        given = loss if input_type is LossInput and loss is not None else None
        try:
            adapted = given or adapt(item, input_type)
        except TypeError as error:  # the step's output does not fit this metric
            raise TypeError(
                f"the {split.value} metric {metric.name!r} ({type(metric).__name__}) "
                f"cannot read the model's output: {error}"
            ) from error
        entry = metric.update(adapted, metadata)
        value = metric.value() if numeric else None  # type: ignore[attr-defined]
        states.append(MetricState(entry, value))
    return states


def _ended(resolved: _Resolved) -> list[MetricState]:
    """The epoch value of every metric of ``resolved``, each cleared after."""
    states = []
    for metric, _, numeric in resolved:
        entry = metric.compute()
        value = metric.final_value() if numeric else None  # type: ignore[attr-defined]
        metric.clear()
        states.append(MetricState(entry, value))
    return states


def _renamed(states: Sequence[MetricState], valid_set: str) -> list[MetricState]:
    """``states`` named after the validation set ``valid_set``: ``Loss (noisy)``."""
    renamed = []
    for state in states:
        entry = copy.copy(state.entry)  # its text is still formatted only when shown
        entry.name = set_metric_name(entry.name, valid_set)
        renamed.append(MetricState(entry, state.numeric))
    return renamed
