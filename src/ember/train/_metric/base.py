"""The metric abstractions: what a metric is, what it records, and how outputs reach it.

A metric is updated once per batch on the ``train-worker`` thread with the model's output
(after ``sync()``) and a :class:`MetricMetadata`, and once more at the end of each split, when
:meth:`Metric.compute` gives the epoch value and :meth:`Metric.clear` starts the next epoch.

Outputs reach metrics through *adaptation* (Burn's ``Adaptor``): each metric names the input type
it reads (``input_type``); :func:`adapt` turns a model output into it. A built-in output adapts
to the built-in inputs; a user's own output feeds built-in metrics by defining
``adapt(self, input_type)`` or by :func:`register_adaptor`; a user's own metric reads built-in
outputs by registering an adaptor for its own input type, or by taking the output type itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

from ember._frozen import set_field
from ember.data import Progress

__all__ = [
    "Adaptable",
    "Described",
    "Metric",
    "MetricAttributes",
    "MetricDefinition",
    "MetricEntry",
    "MetricMetadata",
    "NamedMetric",
    "Numeric",
    "NumericEntry",
    "adapt",
    "format_number",
    "metric_label",
    "metric_name",
    "register_adaptor",
]

T = TypeVar("T")
OutputT = TypeVar("OutputT")


def format_number(value: float) -> str:
    """The shortest text that reads back as ``value``, never in exponent form (``1.0`` -> ``1``).

    This is how Burn writes numbers to metric logs (Rust's ``f64`` display), so logs written by
    ember and by Burn look alike and parse back exactly.
    """
    if type(value) is int:  # a batch's weight: its items
        return str(value)
    text = repr(value)
    if "e" in text or "n" in text:  # exponent form, nan or inf: rare, take the slow path
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        import numpy as np  # lazy: keeps `import ember` fast ("light import")

        return str(np.format_float_positional(value, unique=True, trim="-"))
    return text[:-2] if text.endswith(".0") else text


@dataclass(frozen=True, slots=True, init=False)
class MetricMetadata:
    """What a metric knows about the batch besides the output: where it is and at which lr."""

    progress: Progress
    iteration: int | None
    lr: float | None
    grad_norm: Any = None
    """The gradient norm of the optimizer step the batch closed (a 0-dim tensor), or None."""
    values: Mapping[str, Any] | None = None
    """What the batch's step logged with ``current_step().log(name, value)``, by name, or
    None (a number or a one-element tensor each)."""
    items: int | None = None
    """The batch's item count as its output says it (``LossInput.items``: the weight of its
    mean loss), or None when the output does not say it."""

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self,
        progress: Progress,
        iteration: int | None,
        lr: float | None,
        grad_norm: Any = None,
        values: Mapping[str, Any] | None = None,
        items: int | None = None,
    ) -> None:
        set_field(self, "progress", progress)
        set_field(self, "iteration", iteration)
        set_field(self, "lr", lr)
        set_field(self, "grad_norm", grad_norm)
        set_field(self, "values", values)
        set_field(self, "items", items)


@dataclass(frozen=True, slots=True)
class MetricAttributes:
    """Properties of a numeric metric used by renderers, plots and the summary."""

    unit: str | None = None
    higher_is_better: bool = False


def metric_label(name: str, unit: str | None) -> str:
    """How a metric is named beside its values, the same in every table and renderer line:
    its name, then its unit in parentheses if it has one (``Accuracy (%)``, ``Loss``)."""
    return f"{name} ({unit})" if unit else name


@dataclass(frozen=True, slots=True)
class MetricDefinition:
    """A registered metric as loggers and renderers see it."""

    name: str
    description: str | None = None
    attributes: MetricAttributes | None = None

    @property
    def is_numeric(self) -> bool:
        """Numeric metrics have attributes; they get plots and summary rows."""
        return self.attributes is not None

    @property
    def label(self) -> str:
        """The metric's name with its unit (:func:`metric_label`)."""
        return metric_label(self.name, None if self.attributes is None else self.attributes.unit)


class MetricEntry:
    """One value of a metric: ``formatted`` for people, ``serialized`` for the log file.

    ``formatted`` may be given as a function: it is then called only when a renderer reads it,
    so metrics pay for text nobody shows only once per look, not once per batch.
    """

    __slots__ = ("_formatted", "name", "serialized")

    NOT_AVAILABLE = "N/A"

    def __init__(self, name: str, formatted: str | Callable[[], str], serialized: str) -> None:
        self.name = name
        self.serialized = serialized
        self._formatted = formatted

    @property
    def formatted(self) -> str:
        """The text shown to people."""
        if not isinstance(self._formatted, str):
            self._formatted = self._formatted()
        return self._formatted

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetricEntry):
            return NotImplemented
        return (self.name, self.formatted, self.serialized) == (
            other.name,
            other.formatted,
            other.serialized,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable cache inside: not hashable

    def __repr__(self) -> str:
        return f"MetricEntry({self.name!r}, {self.formatted!r}, {self.serialized!r})"

    @property
    def is_available(self) -> bool:
        """Entries without a value (e.g. an epoch-only metric mid-epoch) are not logged."""
        return self.serialized not in ("", self.NOT_AVAILABLE)


@dataclass(frozen=True, slots=True, init=False)
class NumericEntry:
    """A number in a metric log: a plain value, a value with its weight, or an epoch value.

    Serialized as ``value``, ``value,weight`` or ``value,final`` (``docs/design.md``).
    """

    value: float
    weight: float | None = None
    final: bool = False

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self, value: float, weight: float | None = None, final: bool = False
    ) -> None:
        set_field(self, "value", value)
        set_field(self, "weight", weight)
        set_field(self, "final", final)

    def serialize(self) -> str:
        """The log-file text of this entry."""
        if self.final:
            return f"{format_number(self.value)},final"
        if self.weight is not None:
            return f"{format_number(self.value)},{format_number(self.weight)}"
        return format_number(self.value)

    @classmethod
    def parse(cls, text: str) -> NumericEntry:
        """Read back one log line; a malformed line raises ``ValueError`` quoting it."""
        parts = text.strip().split(",")
        try:
            if len(parts) == 1:
                return cls(float(parts[0]))
            if len(parts) == 2:
                if parts[1] == "final":
                    return cls(float(parts[0]), final=True)
                return cls(float(parts[0]), weight=float(parts[1]))
        except ValueError:
            pass
        raise ValueError(f"not a numeric metric entry: {text!r}")


@runtime_checkable
class Metric(Protocol):
    """A metric updated per batch on the metrics thread.

    ``input_type`` is the type ``update`` receives; :func:`adapt` converts the model's output to
    it. Use ``object`` for metrics that read only the metadata (learning rate, speed).
    """

    @property
    def name(self) -> str:
        """Unique name; also the log-file stem (spaces become ``_``)."""
        ...

    @property
    def input_type(self) -> type[Any]:
        """The type ``update`` reads."""
        ...

    def update(self, item: Any, metadata: MetricMetadata) -> MetricEntry:
        """Record one batch and return its entry."""
        ...

    def compute(self) -> MetricEntry:
        """The epoch entry, computed at the end of a split."""
        ...

    def clear(self) -> None:
        """Forget the epoch; called right after :meth:`compute`."""
        ...


@runtime_checkable
class Numeric(Metric, Protocol):
    """A metric with numeric values: it is plotted, summarised and can drive decisions."""

    @property
    def attributes(self) -> MetricAttributes:
        """Unit and direction of the metric."""
        ...

    def value(self) -> NumericEntry | None:
        """The last batch's value, or None for metrics with epoch values only."""
        ...

    def running_value(self) -> NumericEntry | None:
        """The value of the epoch so far."""
        ...

    def final_value(self) -> NumericEntry:
        """The epoch value, valid after :meth:`Metric.compute`."""
        ...


@runtime_checkable
class NamedMetric(Protocol):
    """Anything with a metric ``name``, such as ember's metrics."""

    @property
    def name(self) -> str:
        """The metric's name, as logged."""
        ...


def metric_name(metric: str | NamedMetric, what: str = "metric") -> str:
    """The name of ``metric`` (a metric or its name), for strategies that read it back."""
    name = metric.name if isinstance(metric, NamedMetric) else metric
    if not isinstance(name, str) or not name:
        raise TypeError(f"{what} must be a metric or a non-empty metric name, got {metric!r}")
    return name


@runtime_checkable
class Described(Protocol):
    """A metric with a ``description`` (shown by renderers; optional for a metric)."""

    @property
    def description(self) -> str | None:
        """One line saying what the metric measures."""
        ...


def metric_definition(metric: Metric) -> MetricDefinition:
    """The definition loggers and renderers receive for ``metric``."""
    attributes = metric.attributes if isinstance(metric, Numeric) else None
    description = metric.description if isinstance(metric, Described) else None
    return MetricDefinition(metric.name, description, attributes)


@runtime_checkable
class Adaptable(Protocol):
    """An output that turns itself into the input a metric reads (see :func:`adapt`)."""

    def adapt(self, input_type: type[Any]) -> Any:
        """This output as an ``input_type``, or anything else if it cannot be one."""
        ...


_ADAPTORS: dict[tuple[type[Any], type[Any]], Callable[[Any], Any]] = {}
_RESOLVED: dict[tuple[type[Any], type[Any]], Callable[[Any], Any] | None] = {}


def register_adaptor(
    output_type: type[OutputT], input_type: type[T]
) -> Callable[[Callable[[OutputT], T]], Callable[[OutputT], T]]:
    """Declare how ``output_type`` feeds metrics that read ``input_type`` (a decorator).

    ::

        @register_adaptor(MyOutput, LossInput)
        def _(out: MyOutput) -> LossInput:
            return LossInput(out.loss)
    """

    def register(fn: Callable[[OutputT], T]) -> Callable[[OutputT], T]:
        _ADAPTORS[(output_type, input_type)] = fn
        _RESOLVED.clear()
        return fn

    return register


def adapt(item: Any, input_type: type[T]) -> T:
    """Turn a model output into the input a metric reads.

    Tried in order: the item already is an ``input_type``; an adaptor registered for the item's
    type (or a base class); the item's own ``adapt(input_type)`` method.
    """
    if isinstance(item, input_type):
        return item
    key = (type(item), input_type)
    if key in _RESOLVED:
        fn = _RESOLVED[key]
    else:
        fn = _RESOLVED[key] = next(
            (f for cls in type(item).__mro__ if (f := _ADAPTORS.get((cls, input_type)))), None
        )
    if fn is not None:
        return fn(item)  # type: ignore[no-any-return]  # the registry erases the types
    if isinstance(item, Adaptable):
        adapted = item.adapt(input_type)
        if isinstance(adapted, input_type):
            return adapted
    feeders = sorted({output.__name__ for output, target in _ADAPTORS if target is input_type})
    known = f"return one that does ({', '.join(feeders)}), " if feeders else ""
    raise TypeError(
        f"{type(item).__name__} cannot feed a metric that reads {input_type.__name__}: "
        f"{known}give {type(item).__name__} an adapt(input_type) method or register one with "
        f"ember.extend.register_adaptor({type(item).__name__}, {input_type.__name__})"
    )
