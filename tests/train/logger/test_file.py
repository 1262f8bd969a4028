"""The file logs' names: a metric's name is never a path (its file stays in its split's directory
and reads back as the same name), and Burn's file names stay as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember._rundir.metric_logs import metric_file_name, metric_name
from ember.runs import load
from ember.train import FileMetricLogger, Learner, LossMetric, SupervisedTraining
from ember.train._metric.values import MetricValue
from ember.train._vocabulary import Split
from tests.train.fixtures import TinyRegressor, loader, quiet


class NamedLoss(LossMetric):
    """The loss under a name of the test's choosing (a per-class metric named after a label)."""

    def __init__(self, name: str) -> None:
        self.metric_name = name
        super().__init__()


def test_a_metric_named_as_a_path_writes_inside_its_split_directory(tmp_path: Path) -> None:
    """The attack: a metric named ``../../../../X`` wrote and truncated ``X.log`` outside the run
    directory; now its file is in its epoch's directory and reads back under its name."""
    run = tmp_path / "a" / "b" / "run"
    model = TinyRegressor()
    result = (
        quiet(run, loader(8, 4), loader(4, 4))
        .metrics(NamedLoss("../../../../X"))
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 1e-2))
    )
    assert result.succeeded
    assert list(tmp_path.rglob("X.log")) == []
    files = {path.relative_to(run).as_posix() for path in run.rglob("*.log")}
    assert "train/epoch-1/..%2F..%2F..%2F..%2FX.log" in files
    assert "valid/epoch-2/..%2F..%2F..%2F..%2FX.log" in files
    logged = load(run)
    assert logged.metrics() == ["../../../../X"]
    assert logged.values("valid", "../../../../X") == result.values("valid", "../../../../X")


@pytest.mark.parametrize(
    "name", ["Loss", "Accuracy", "Top-K Accuracy @ TopK(5)", "CPU Memory", "100 %", "a:b"]
)
def test_names_without_a_separator_keep_burns_file_name(name: str) -> None:
    """Spaces as ``_``, nothing else changed: the files of every name used so far are the same."""
    assert metric_file_name(name) == name.replace(" ", "_") + ".log"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.text(min_size=1, max_size=60))
def test_any_name_stays_in_its_directory_and_reads_back_as_written(
    tmp_path_factory: pytest.TempPathFactory, name: str
) -> None:
    """Any text as a metric name: its log file is in its epoch's directory, and ember.runs
    reads the run back under the same name, value for value."""
    run = tmp_path_factory.mktemp("names") / "run"
    logger = FileMetricLogger(run)
    values = [MetricValue(name, Split.TRAIN, 1, step, float(step), 2.0) for step in (1, 2)]
    logger.log([*values, MetricValue(name, Split.TRAIN, 1, 2, 1.5, final=True)])
    logger.end_split(1, Split.TRAIN)
    logger.close()
    files = [path.relative_to(run) for path in run.rglob("*") if path.is_file()]
    assert sorted(path.parent.as_posix() for path in files) == ["train", "train/epoch-1"]
    assert metric_name(metric_file_name(name)) == name.replace("_", " ")  # without steps
    run_read = load(run)
    assert run_read.metrics() == [name]
    assert [(row.step, row.value) for row in run_read.rows("item")] == [(1, 1.0), (2, 2.0)]
    assert run_read.values("train", name) == {1: 1.5}


@pytest.mark.parametrize(
    ("name", "problem"),
    [("", "must not be empty"), ("x" * 252, "its log file's name would be 256 bytes")],
)
def test_a_name_that_cannot_be_a_file_name_is_refused_at_registration(
    tmp_path: Path, name: str, problem: str
) -> None:
    """An empty name, or one too long for a file name, is refused when the metric is
    registered, naming the metric and the rule, not when its first line is written."""
    builder = SupervisedTraining(tmp_path / "run", loader(8, 4), loader(4, 4))
    with pytest.raises(ValueError, match=f"NamedLoss cannot be registered: .*{problem}"):
        builder.metric_train_numeric(NamedLoss(name))
