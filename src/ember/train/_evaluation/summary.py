"""The evaluation summary: each test's metric values, as a table and as ``summary.json``.

Burn prints an evaluation in its learner table with Min./Epoch/Max./Epoch columns, all equal for
a single pass; ember prints one value per row instead::

    ======================== Evaluation Summary ========================
    | Test | Metric   | Value    |
    |------|----------|----------|
    | test | Accuracy | 97.222   |
    | test | Loss     | 0.102    |

Values are formatted as in the learner summary (3 decimals, Rust's exponent form below 0.01).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ember.train._summary import format_cell

__all__ = ["EvaluationSummary", "TestValue"]

_RULE = "=" * 24


@dataclass(frozen=True, slots=True)
class TestValue:
    """One row: the value of ``metric`` over the whole test ``test``."""

    __test__ = False  # not a pytest class, whatever its name

    test: str
    metric: str
    value: float


@dataclass(frozen=True, slots=True)
class EvaluationSummary:
    """What an evaluation measured; ``str()`` gives the printed table."""

    values: tuple[TestValue, ...] = ()

    @classmethod
    def from_values(cls, values: Mapping[str, Mapping[str, float]]) -> EvaluationSummary:
        """Rows from ``{test: {metric: value}}``: tests in the order given, metrics sorted."""
        return cls(
            tuple(
                TestValue(test, metric, float(metrics[metric]))
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
        width_name = max([6, *(len(row.metric) for row in self.values)])
        out = [
            f"{_RULE} Evaluation Summary {_RULE}",
            f"| {'Test':<{width_test}} | {'Metric':<{width_name}} | Value    |",
            f"|{'-' * (width_test + 2)}|{'-' * (width_name + 2)}|----------|",
        ]
        for row in self.values:
            out.append(
                f"| {row.test:<{width_test}} | {row.metric:<{width_name}} "
                f"| {format_cell(row.value)}|"
            )
        return "\n".join(out)
