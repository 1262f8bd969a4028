"""Any torchmetrics metric as an ember metric, run on the metrics thread.

torchmetrics is an optional extra (``pip install ember[metrics]``): it is imported when a
:class:`TorchMetric` is built, never by ``import ember``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, overload

import torch

from ember._rundir.metric_logs import NumericEntry, format_number
from ember.train._metric.accuracy import AccuracyInput
from ember.train._metric.base import MetricAttributes, MetricEntry, MetricMetadata
from ember.train._metric.resumable import check_state_fields, state_count, state_float
from ember.train._metric.state import format_value

if TYPE_CHECKING:
    from torchmetrics import Metric as TorchmetricsMetric

__all__ = ["NumericTorchMetric", "TorchMetric"]

InputFn = Callable[[Any], tuple[torch.Tensor, torch.Tensor]]


def _import_torchmetrics() -> ModuleType:
    try:
        import torchmetrics
    except ImportError as error:
        raise ImportError(
            "TorchMetric needs torchmetrics, an optional extra: pip install ember[metrics]"
        ) from error
    return torchmetrics


def _describe(result: object) -> str:
    """A computed value as text: numbers plainly, tensors as (nested) lists, dicts by key."""
    if isinstance(result, torch.Tensor):
        result = result.tolist()
    if isinstance(result, dict):
        return ", ".join(f"{key}: {_describe(value)}" for key, value in result.items())
    if isinstance(result, float):
        return format_number(result)
    if isinstance(result, list | tuple):
        return "[" + ", ".join(_describe(value) for value in result) + "]"
    return str(result)


class TorchMetric:
    """Runs a ``torchmetrics.Metric`` on each batch; its ``compute()`` is the epoch value.

    ``metric`` is a torchmetrics metric instance (``MulticlassAccuracy(num_classes=10)``); it is
    moved to the device of the batch's predictions. ``name`` defaults to its class name. The
    metric's ``update(preds, target)`` gets, by default, the ``outputs`` and ``targets`` of an
    :class:`~ember.train._metric.accuracy.AccuracyInput` (any output that adapts to it); with
    ``input_fn``, ``input_fn(output) -> (preds, target)`` reads the synced model output itself.

    By default the metric is numeric: its ``compute()`` must give one number. Each batch logs
    the batch's own value (torchmetrics' ``forward``) weighted by its samples, or nothing with
    ``batch_values=False`` (cheaper: ``update`` only); the epoch value is ``compute()`` over the
    epoch. With ``numeric=False`` any result (per-class tensors, dicts) is logged as text once
    per epoch. ``higher_is_better`` defaults to the torchmetrics class's own flag.
    """

    @overload
    def __new__(
        cls,
        metric: TorchmetricsMetric,
        name: str | None = None,
        input_fn: InputFn | None = None,
        *,
        numeric: Literal[True] = True,
        batch_values: bool = True,
        higher_is_better: bool | None = None,
        unit: str | None = None,
    ) -> NumericTorchMetric: ...

    @overload
    def __new__(
        cls,
        metric: TorchmetricsMetric,
        name: str | None = None,
        input_fn: InputFn | None = None,
        *,
        numeric: Literal[False],
        batch_values: bool = True,
        higher_is_better: bool | None = None,
        unit: str | None = None,
    ) -> TorchMetric: ...

    def __new__(
        cls,
        metric: TorchmetricsMetric | None = None,
        name: str | None = None,
        input_fn: InputFn | None = None,
        *,
        numeric: bool = True,
        batch_values: bool = True,
        higher_is_better: bool | None = None,
        unit: str | None = None,
    ) -> TorchMetric:
        # A numeric metric must have the Numeric methods (checked structurally) and a text one
        # must not, so the class follows ``numeric`` (as pathlib.Path picks its flavour). All set-up
        # happens here, so type checkers see the class returned.
        target: type[TorchMetric] = NumericTorchMetric if cls is TorchMetric and numeric else cls
        self = object.__new__(target)
        if metric is not None:  # None: copy.deepcopy / pickle rebuilding an instance
            self._setup(metric, name, input_fn, batch_values, higher_is_better, unit)
        return self

    def _setup(
        self,
        metric: TorchmetricsMetric,
        name: str | None,
        input_fn: InputFn | None,
        batch_values: bool,
        higher_is_better: bool | None,
        unit: str | None,
    ) -> None:
        torchmetrics = _import_torchmetrics()
        if not isinstance(metric, torchmetrics.Metric):
            raise TypeError(f"metric must be a torchmetrics.Metric, got {type(metric).__name__}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if input_fn is not None and not callable(input_fn):
            raise TypeError(f"input_fn must be callable, got {input_fn!r}")
        self.metric = metric
        self._name = name if name is not None else type(metric).__name__
        self._input_fn = input_fn
        self._batch_values = bool(batch_values)
        self._unit = unit
        default = getattr(metric, "higher_is_better", False)
        self._higher_is_better = bool(default if higher_is_better is None else higher_is_better)
        self._updates = 0
        self._samples = 0

    @property
    def name(self) -> str:
        """The given name, or the torchmetrics class name."""
        return self._name

    @property
    def input_type(self) -> type[Any]:
        """:class:`AccuracyInput` by default; the output itself with ``input_fn``."""
        return AccuracyInput if self._input_fn is None else object

    def _inputs(self, item: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if self._input_fn is None:
            preds, target = item.outputs, item.targets
        else:
            preds, target = self._input_fn(item)
        if self.metric.device != preds.device:
            self.metric.to(preds.device)  # once: the states then live where the batches are
        self._updates += 1
        self._samples += preds.shape[0] if preds.dim() else 1
        return preds, target

    def update(self, item: Any, metadata: MetricMetadata) -> MetricEntry:
        """Add the batch to the metric's state; the value comes at the epoch end."""
        self.metric.update(*self._inputs(item))
        return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)

    def compute(self) -> MetricEntry:
        """The metric's ``compute()`` over the epoch, as text."""
        if not self._updates:
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        text = _describe(self.metric.compute())
        return MetricEntry(self.name, text, text)

    def clear(self) -> None:
        """Reset the metric for the next epoch."""
        self.metric.reset()
        self._updates = 0
        self._samples = 0

    def state_dict(self) -> dict[str, Any]:
        """The torchmetrics metric's states (``metric_state``: tensors, or lists of tensors)
        and the epoch's counts so far (``StatefulMetric``)."""
        states = {
            name: [t.clone() for t in value] if isinstance(value, list) else value.clone()
            for name, value in self.metric.metric_state.items()
        }
        return {
            "states": states,
            "metric_updates": self.metric.update_count,
            "updates": self._updates,
            "samples": self._samples,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict` (the states go to the metric's
        device)."""
        checked = check_state_fields(
            self, state, ("states", "metric_updates", "updates", "samples")
        )
        saved, own = checked["states"], self.metric.metric_state
        if not isinstance(saved, dict) or sorted(saved) != sorted(own):
            found = sorted(saved) if isinstance(saved, dict) else saved
            raise ValueError(
                f"the saved state of metric {self.name!r} holds the states {found!r}, its "
                f"torchmetrics metric has {sorted(own)}"
            )
        device = self.metric.device
        for name, value in saved.items():
            if isinstance(value, list):
                value = [tensor.to(device) for tensor in value]
            elif isinstance(value, torch.Tensor):
                value = value.to(device)
            else:
                raise ValueError(
                    f"the saved state {name!r} of metric {self.name!r} is not a tensor"
                )
            setattr(self.metric, name, value)
        self.metric._update_count = state_count(checked, self, "metric_updates")
        self.metric._computed = None  # a cached compute() of the state before
        self._updates = state_count(checked, self, "updates")
        self._samples = state_count(checked, self, "samples")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.metric!r}, name={self.name!r})"


class NumericTorchMetric(TorchMetric):
    """A :class:`TorchMetric` whose ``compute()`` is one number (what ``TorchMetric`` builds)."""

    def _setup(
        self,
        metric: TorchmetricsMetric,
        name: str | None,
        input_fn: InputFn | None,
        batch_values: bool,
        higher_is_better: bool | None,
        unit: str | None,
    ) -> None:
        super()._setup(metric, name, input_fn, batch_values, higher_is_better, unit)
        self._current = math.nan
        self._current_weight = 0
        self._final = math.nan

    @property
    def attributes(self) -> MetricAttributes:
        """The unit given, and the direction of the torchmetrics class (or the one given)."""
        return MetricAttributes(unit=self._unit, higher_is_better=self._higher_is_better)

    def _number(self, result: object) -> float:
        if isinstance(result, torch.Tensor) and result.numel() == 1:
            return float(result.item())
        if isinstance(result, int | float) and not isinstance(result, bool):
            return float(result)
        shape = tuple(result.shape) if isinstance(result, torch.Tensor) else type(result).__name__
        raise ValueError(
            f"{self.name}: compute() gave {shape}, not one number; "
            "pass numeric=False to TorchMetric to log it as text"
        )

    def _text(self, value: float) -> str:
        return format_value(value, 4, self._unit)

    def update(self, item: Any, metadata: MetricMetadata) -> MetricEntry:
        """Add the batch; log its own value (``forward``) weighted by its samples."""
        preds, target = self._inputs(item)
        if not self._batch_values:
            self.metric.update(preds, target)
            return MetricEntry(self.name, "N/A", MetricEntry.NOT_AVAILABLE)
        value = self._number(self.metric(preds, target))
        weight = preds.shape[0] if preds.dim() else 1
        self._current, self._current_weight = value, weight
        return MetricEntry(
            self.name,
            lambda: f"batch {self._text(value)}",
            f"{format_number(value)},{format_number(weight)}",
        )

    def compute(self) -> MetricEntry:
        """The epoch value, the metric's ``compute()`` (``value,final`` in the log)."""
        self._final = self._number(self.metric.compute()) if self._updates else math.nan
        final = self._final
        return MetricEntry(
            self.name, lambda: f"epoch {self._text(final)}", self.final_value().serialize()
        )

    def clear(self) -> None:
        """Reset the metric for the next epoch."""
        super().clear()
        self._current = math.nan
        self._current_weight = 0
        self._final = math.nan

    def state_dict(self) -> dict[str, Any]:
        """:meth:`TorchMetric.state_dict` and the last batch's value."""
        return {
            **super().state_dict(),
            "current": self._current,
            "current_weight": self._current_weight,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch from a :meth:`state_dict`."""
        super().load_state_dict(state)
        checked = check_state_fields(self, state, ("current", "current_weight"))
        self._current = state_float(checked, self, "current")
        self._current_weight = state_count(checked, self, "current_weight")

    def value(self) -> NumericEntry | None:
        """The last batch's value (None with ``batch_values=False``)."""
        if not self._batch_values:
            return None
        return NumericEntry(self._current, weight=self._current_weight)

    def running_value(self) -> NumericEntry | None:
        """The metric's ``compute()`` so far (it computes: call it sparingly)."""
        if not self._updates:
            return None
        return NumericEntry(self._number(self.metric.compute()), weight=self._samples)

    def final_value(self) -> NumericEntry:
        """The epoch value, valid after :meth:`compute`."""
        return NumericEntry(self._final, final=True)
