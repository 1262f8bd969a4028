"""The records built per batch write their ``__init__`` out (``ember/_frozen.py``): each must
take exactly its fields, in order, with their defaults, and stay a frozen dataclass."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

from ember.data import Progress
from ember.extend import (
    LossInput,
    MetricMetadata,
    MetricState,
    MetricValue,
    NumericEntry,
    ProcessedItem,
    StepContext,
)
from ember.train import TrainingItem, TrainOutput

WRITTEN_OUT = [
    Progress,
    TrainingItem,
    ProcessedItem,
    TrainOutput,
    StepContext,
    MetricMetadata,
    NumericEntry,
    MetricState,
    MetricValue,
    LossInput,
]


@pytest.mark.parametrize("record", WRITTEN_OUT, ids=lambda record: record.__name__)
def test_the_written_out_init_takes_the_fields_in_order_with_their_defaults(
    record: type[Any],
) -> None:
    """The signature is what ``@dataclass`` would generate: names, order, defaults."""
    fields = dataclasses.fields(record)
    parameters = list(inspect.signature(record.__init__).parameters.values())[1:]
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        expected = (
            inspect.Parameter.empty if field.default is dataclasses.MISSING else field.default
        )
        assert parameter.default == expected, field.name
        assert parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD


@pytest.mark.parametrize("record", WRITTEN_OUT, ids=lambda record: record.__name__)
def test_the_record_stays_frozen_and_comparable(record: type[Any]) -> None:
    """Every field is set from its argument; assignment is refused; equality and replace work."""
    fields = dataclasses.fields(record)
    values = {field.name: (index, field.name) for index, field in enumerate(fields)}
    made = record(**values)
    assert all(getattr(made, name) == value for name, value in values.items())
    assert made == record(*values.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, fields[0].name, None)
    changed = dataclasses.replace(made, **{fields[-1].name: "other"})
    assert getattr(changed, fields[-1].name) == "other" and changed != made
