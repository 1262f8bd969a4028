"""SupervisedTraining: each argument validated at the call, naming the value and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ember.extend import MetricEntry, MetricMetadata
from ember.train import LossMetric, SupervisedTraining
from tests.train.fixtures import loader


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.num_epochs(0), "num_epochs must be >= 1, got 0"),
        (lambda b: b.grads_accumulation(0), "grads_accumulation must be >= 1, got 0"),
        (lambda b: b.metric_train(LossMetric()).metric_train(LossMetric()), "'Loss' is already"),
    ],
)
def test_builder_rejects_bad_values(call: Any, message: str, tmp_path: Path) -> None:
    """Bad builder values raise ValueError at the call, naming the value."""
    with pytest.raises(ValueError, match=message):
        call(SupervisedTraining(tmp_path, loader(4), loader(4)))


def test_builder_rejects_wrong_types(tmp_path: Path) -> None:
    """Wrong types raise TypeError naming what was given."""
    builder = SupervisedTraining(tmp_path, loader(4), loader(4))
    with pytest.raises(TypeError, match=r"num_epochs must be an int, got 2\.5"):
        builder.num_epochs(2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="metric object lacks name, input_type, update"):
        builder.metric_train_numeric(object())  # type: ignore[arg-type]

    class Text:
        """A metric that is not numeric."""

        name = "Text"
        input_type = object

        def update(self, item: Any, metadata: MetricMetadata) -> MetricEntry:
            return MetricEntry("Text", "x", "x")

        def compute(self) -> MetricEntry:
            return MetricEntry("Text", "x", "x")

        def clear(self) -> None:
            pass

    with pytest.raises(TypeError, match="Text is not a numeric metric"):
        builder.metric_train_numeric(Text())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"renderer object lacks .*start_split.*MetricsRenderer"):
        builder.renderer(object())  # type: ignore[arg-type]


def test_directory_that_is_a_file_is_rejected(tmp_path: Path) -> None:
    """A directory path that is a file raises ValueError naming it."""
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        SupervisedTraining(file, loader(4), loader(4))
