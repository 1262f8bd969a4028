"""The summary tables: a training run's (the model, and each numeric metric's best and worst
epochs) and an evaluation's (each test's metric values).

A :class:`LearnerSummary` is built at the end of training from the logged epoch values (so
epochs from before a resume count too), printed as Burn's table and written to
``summary.json``; an :class:`EvaluationSummary` is printed as Burn's ``| Test | Metric | Value |``
table and written to ``test/summary.json`` (both in ``docs/design.md``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from torch import nn

from ember._table import format_cell, metric_label
from ember.train._metric.query import MetricQuery
from ember.train._vocabulary import Split

__all__ = [
    "EvaluationSummary",
    "LearnerSummary",
    "MetricSummary",
    "TestValue",
    "describe_model",
]

_RULE = "=" * 24


def describe_model(model: nn.Module) -> str:
    """``repr(model)`` with the number of parameters of each module that has any."""

    def lines(module: nn.Module, prefix: str) -> list[str]:
        params = sum(p.numel() for p in module.parameters())
        children = list(module.named_children())
        title = f"{prefix}{type(module).__name__}"
        if not children:
            parts = [part for part in (module.extra_repr(), params and f"params: {params}") if part]
            return [f"{title}({', '.join(str(part) for part in parts)})"]
        body = [f"  {line}" for name, child in children for line in lines(child, f"({name}): ")]
        return [f"{title}(", *body, f"  params: {params}", ")"]

    return "\n".join(lines(model, ""))


def _sort_key(value: float) -> float:
    return math.inf if math.isnan(value) else value


@dataclass(frozen=True, slots=True)
class MetricSummary:
    """One row of the table: a metric on a split, with its extreme epoch values; ``unit``
    (the metric's ``attributes.unit``, e.g. ``"%"`` for Accuracy) is shown after the name."""

    split: str
    name: str
    min_value: float
    min_epoch: int
    max_value: float
    max_epoch: int
    unit: str | None = None

    @classmethod
    def from_values(
        cls, split: Split, name: str, values: Sequence[tuple[int, float]], unit: str | None = None
    ) -> MetricSummary:
        """Min is the first minimal epoch, max the last maximal one (NaN counts as largest)."""
        min_epoch, min_value = min(values, key=lambda pair: _sort_key(pair[1]))
        max_epoch, max_value = max(reversed(values), key=lambda pair: _sort_key(pair[1]))
        return cls(split.value.capitalize(), name, min_value, min_epoch, max_value, max_epoch, unit)

    @property
    def label(self) -> str:
        """The Metric column's text: ``Accuracy (%)``, or the bare name without a unit."""
        return metric_label(self.name, self.unit)


@dataclass(frozen=True, slots=True)
class LearnerSummary:
    """What a finished training run reached; ``str()`` gives the printed table."""

    epochs: int
    metrics: tuple[MetricSummary, ...] = ()
    model: str | None = None
    stop_reason: str | None = None

    @classmethod
    def collect(
        cls,
        query: MetricQuery,
        names: Iterable[str],
        epochs: int,
        *,
        model: str | None = None,
        stop_reason: str | None = None,
        units: Mapping[str, str | None] | None = None,
    ) -> LearnerSummary:
        """Read the epoch values of ``names`` (sorted) for epochs 1..``epochs`` on both splits;
        ``units`` gives a metric's unit by name."""
        rows = []
        for split in (Split.TRAIN, Split.VALID):
            for name in sorted(set(names)):
                values = [
                    (epoch, value)
                    for epoch in range(1, epochs + 1)
                    if (value := query.find_metric(name, epoch, split)) is not None
                ]
                if values:
                    unit = (units or {}).get(name)
                    rows.append(MetricSummary.from_values(split, name, values, unit))
        return cls(epochs, tuple(rows), model, stop_reason)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``summary.json``)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LearnerSummary:
        """Read back what :meth:`to_json` wrote."""
        rows = tuple(MetricSummary(**row) for row in data.get("metrics", []))
        return cls(
            int(data["epochs"]),
            rows,
            data.get("model"),
            data.get("stop_reason"),
        )

    def dumps(self) -> str:
        """``summary.json``'s text."""
        return json.dumps(self.to_json(), indent=2, allow_nan=True) + "\n"

    def __str__(self) -> str:
        width_split = max([5, *(len(row.split) for row in self.metrics)])
        width_name = max([6, *(len(row.label) for row in self.metrics)])
        out = [f"{_RULE} Learner Summary {_RULE}"]
        if self.model is not None:
            out += ["Model:", self.model]
        out.append(f"Total Epochs: {self.epochs}")
        if self.stop_reason:
            out.append(f"Stopped: {self.stop_reason}")
        out += [
            "",
            "",
            f"| {'Split':<{width_split}} | {'Metric':<{width_name}} "
            "| Min.     | Epoch    | Max.     | Epoch    |",
            f"|{'-' * (width_split + 2)}|{'-' * (width_name + 2)}"
            "|----------|----------|----------|----------|",
        ]
        for row in self.metrics:
            out.append(
                f"| {row.split:<{width_split}} | {row.label:<{width_name}} "
                f"| {format_cell(row.min_value)}| {row.min_epoch:<9}"
                f"| {format_cell(row.max_value)}| {row.max_epoch:<9}|"
            )
        return "\n".join(out)


@dataclass(frozen=True, slots=True)
class TestValue:
    """One row: the value of ``metric`` over the whole test ``test``; ``unit`` (the metric's
    ``attributes.unit``) is shown after the name, as in the training summary."""

    __test__ = False  # not a pytest class, whatever its name

    test: str
    metric: str
    value: float
    unit: str | None = None

    @property
    def label(self) -> str:
        """The Metric column's text: ``Accuracy (%)``, or the bare name without a unit."""
        return metric_label(self.metric, self.unit)


@dataclass(frozen=True, slots=True)
class EvaluationSummary:
    """What an evaluation measured; ``str()`` gives the printed table."""

    values: tuple[TestValue, ...] = ()

    @classmethod
    def from_values(
        cls,
        values: Mapping[str, Mapping[str, float]],
        units: Mapping[str, str | None] | None = None,
    ) -> EvaluationSummary:
        """Rows from ``{test: {metric: value}}``: tests in the order given, metrics sorted;
        ``units`` gives a metric's unit by name."""
        return cls(
            tuple(
                TestValue(test, metric, float(metrics[metric]), (units or {}).get(metric))
                for test, metrics in values.items()
                for metric in sorted(metrics)
            )
        )

    def value(self, metric: str, test: str | None = None) -> float:
        """The value of ``metric`` on ``test`` (None: the summary's only test); KeyError naming
        what exists otherwise."""
        if test is None:
            tests = {row.test for row in self.values}
            if len(tests) > 1:
                raise KeyError(f"name the test: the summary has {sorted(tests)}")
            test = next(iter(tests), "")
        for row in self.values:
            if row.test == test and row.metric == metric:
                return row.value
        known = ", ".join(f"{row.test}/{row.metric}" for row in self.values) or "nothing"
        raise KeyError(f"no value of {metric!r} for test {test!r}; the summary has {known}")

    def merged(self, other: EvaluationSummary) -> EvaluationSummary:
        """This summary with ``other``'s tests replacing or following its own."""
        tests = {row.test for row in other.values}
        return EvaluationSummary(
            tuple(row for row in self.values if row.test not in tests) + other.values
        )

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``test/summary.json``)."""
        return {"tests": [asdict(row) for row in self.values]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EvaluationSummary:
        """Read back what :meth:`to_json` wrote."""
        return cls(tuple(TestValue(**row) for row in data.get("tests", [])))

    def dumps(self) -> str:
        """``test/summary.json``'s text."""
        return json.dumps(self.to_json(), indent=2, allow_nan=True) + "\n"

    def __str__(self) -> str:
        width_test = max([4, *(len(row.test) for row in self.values)])
        width_name = max([6, *(len(row.label) for row in self.values)])
        out = [
            f"{_RULE} Evaluation Summary {_RULE}",
            f"| {'Test':<{width_test}} | {'Metric':<{width_name}} | Value    |",
            f"|{'-' * (width_test + 2)}|{'-' * (width_name + 2)}|----------|",
        ]
        for row in self.values:
            out.append(
                f"| {row.test:<{width_test}} | {row.label:<{width_name}} "
                f"| {format_cell(row.value)}|"
            )
        return "\n".join(out)
