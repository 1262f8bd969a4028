"""The logger protocol through a recording logger in real runs: numbers with global steps that
go on across a resume, the run's configuration, the end with the summary and the artifacts; and
extra loggers adding to the file logs (turning them off is explicit, refused where needed)."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.extend import MetricLogger, MetricValue
from ember.train import (
    CliMetricsRenderer,
    FileMetricLogger,
    InMemoryMetricLogger,
    KeepLastNCheckpoints,
    Learner,
    LearnerSummary,
    LossMetric,
    MetricEarlyStoppingStrategy,
    Split,
    StoppingCondition,
    SupervisedTraining,
    TensorBoardLogger,
)
from tests.train.fixtures import TinyRegressor, loader

TRAIN_BATCHES = 3  # 10 items, batch 4
VALID_BATCHES = 2  # 6 items, batch 4


class RecordingLogger:
    """A tracker as a user writes one: a plain class with the protocol's five methods."""

    def __init__(self) -> None:
        self.config: Mapping[str, Any] | None = None
        self.values: list[MetricValue] = []
        self.splits: list[tuple[int, Split]] = []
        self.ended: tuple[LearnerSummary | None, dict[str, Path]] | None = None
        self.closed = 0

    def start(self, config: Mapping[str, Any]) -> None:
        self.config = config

    def log(self, values: Sequence[MetricValue]) -> None:
        self.values.extend(values)

    def end_split(self, epoch: int, split: Split) -> None:
        self.splits.append((epoch, split))

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        self.ended = (summary, dict(artifacts))

    def close(self) -> None:
        self.closed += 1


def builder(directory: Path, *loggers: MetricLogger) -> SupervisedTraining:
    training = (
        SupervisedTraining(directory, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
    )
    for logger in loggers:
        training = training.with_metric_logger(logger)
    return training


def learner(model: TinyRegressor) -> Learner[TinyRegressor]:
    return Learner(model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5), 0.05)


def train_steps(values: list[MetricValue]) -> list[int]:
    return [v.step for v in values if v.split is Split.TRAIN and v.name == "Loss" and not v.final]


def test_numbers_configuration_and_end(model: TinyRegressor, run_dir: Path) -> None:
    """Numbers (not text) with epoch, split, step and weight; the configuration at start, the
    same as config.json; the summary and the artifacts' paths at the end; close once."""
    recorder = RecordingLogger()
    result = (
        builder(run_dir, recorder)
        .num_epochs(2)
        .hparams({"hidden": 64, "note": "baseline"})
        .summary()
        .launch(learner(model))
    )
    assert result.error is None, result.traceback
    assert recorder.config == json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    config = recorder.config
    assert config is not None
    assert config["num_epochs"] == 2
    assert config["train"]["batch_size"] == config["valid"]["batch_size"] == 4
    assert config["train"]["seed"] == 1  # the loader's shuffle seed
    assert config["optimizer"]["class"] == "torch.optim.sgd.SGD"
    assert config["optimizer"]["param_groups"][0]["momentum"] == 0.5
    assert config["hparams"] == {"hidden": 64, "note": "baseline"}
    assert config["torch_version"] == torch.__version__
    assert config["metrics"] == {"train": ["Loss"], "valid": ["Loss"]}

    assert all(type(v.value) is float for v in recorder.values)
    assert train_steps(recorder.values) == list(range(1, 2 * TRAIN_BATCHES + 1))
    batches = [v for v in recorder.values if v.split is Split.TRAIN and not v.final]
    # LossMetric weighs each batch its items: 10 items in batches of 4
    assert [v.weight for v in batches] == [4.0, 4.0, 2.0] * 2
    finals = [v for v in recorder.values if v.final]
    assert [(v.split, v.epoch, v.step) for v in finals] == [
        (Split.TRAIN, 1, 3),
        (Split.VALID, 1, 3),
        (Split.TRAIN, 2, 6),
        (Split.VALID, 2, 6),
    ]
    # the same numbers as the file logs, which stay beside the extra logger
    files = FileMetricLogger(run_dir)
    for split in Split:
        logged = [v.entry for v in recorder.values if v.split is split and v.epoch == 2]
        assert files.read_numeric("Loss", 2, split) == logged
    assert recorder.splits == [
        (1, Split.TRAIN),
        (1, Split.VALID),
        (2, Split.TRAIN),
        (2, Split.VALID),
    ]

    assert recorder.ended is not None
    summary, artifacts = recorder.ended
    assert summary is result.summary and summary is not None
    assert artifacts == {"config": run_dir / "config.json", "summary": run_dir / "summary.json"}
    assert recorder.closed == 1


def test_global_steps_go_on_across_a_resume(model: TinyRegressor, run_dir: Path) -> None:
    """2 epochs, then resumed to 4: every logger's steps go on, strictly increasing, no
    duplicates (TensorBoard's included)."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    tb_dir = run_dir / "tb"
    first, resumed = RecordingLogger(), RecordingLogger()
    for recorder, epochs in ((first, 2), (resumed, 4)):
        training = builder(run_dir, recorder, TensorBoardLogger(tb_dir)).num_epochs(epochs)
        result = training.with_default_checkpointers().resume_latest().launch(learner(model))
        assert result.error is None, result.traceback
    assert train_steps(first.values) == list(range(1, 2 * TRAIN_BATCHES + 1))
    assert train_steps(resumed.values) == list(range(2 * TRAIN_BATCHES + 1, 4 * TRAIN_BATCHES + 1))
    assert resumed.config is not None and resumed.config["resume"] == "latest"

    accumulator = event_accumulator.EventAccumulator(str(tb_dir))
    accumulator.Reload()
    steps = [event.step for event in accumulator.Scalars("train/Loss")]
    assert steps == list(range(1, 4 * TRAIN_BATCHES + 1))
    valid = [event.step for event in accumulator.Scalars("valid/Loss")]
    assert valid == [TRAIN_BATCHES * epoch for epoch in range(1, 5)]


def test_an_extra_logger_keeps_early_stopping_and_the_summary(
    model: TinyRegressor, run_dir: Path
) -> None:
    """with_metric_logger alone used to replace the file logs, so early stopping never fired and
    the summary was empty; the file logs now stay and serve them."""
    result = (
        builder(run_dir, RecordingLogger())
        .num_epochs(5)
        .early_stopping(MetricEarlyStoppingStrategy(LossMetric(), condition=StoppingCondition(1)))
        .summary()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.0), 0.0))
    )
    assert result.error is None, result.traceback
    assert result.stop_reason is not None and "early" in result.stop_reason.lower()
    assert result.summary is not None and result.summary.metrics
    assert (run_dir / "valid" / "epoch-1" / "Loss.log").is_file()


def test_a_given_file_logger_on_the_directory_is_not_doubled(
    model: TinyRegressor, run_dir: Path
) -> None:
    """The docs' old advice, with_metric_logger(FileMetricLogger(dir)), writes each line once."""
    result = builder(run_dir, FileMetricLogger(run_dir)).launch(learner(model))
    assert result.error is None, result.traceback
    lines = (run_dir / "train" / "epoch-1" / "Loss.log").read_text().splitlines()
    assert len(lines) == TRAIN_BATCHES + 1


def test_without_file_logs_and_a_reader(model: TinyRegressor, run_dir: Path) -> None:
    """Turned off explicitly, with a logger that reads back: no metric files, summary intact."""
    memory = InMemoryMetricLogger()
    result = builder(run_dir, memory).without_file_logs().summary().launch(learner(model))
    assert result.error is None, result.traceback
    assert not (run_dir / "train").exists() and not (run_dir / "valid").exists()
    assert result.summary is not None and result.summary.metrics
    assert memory.read_numeric("Loss", 1, Split.VALID)[-1].final


@pytest.mark.parametrize(
    ("configure", "needs"),
    [
        (lambda b: b.summary(), "the summary"),
        (
            lambda b: b.early_stopping(MetricEarlyStoppingStrategy(LossMetric())),
            "early stopping (MetricEarlyStoppingStrategy)",
        ),
        (lambda b: b.with_default_checkpointers(), "the checkpointing strategy"),
    ],
    ids=["summary", "early-stopping", "checkpointing"],
)
def test_without_file_logs_refused_where_values_are_read(
    model: TinyRegressor, run_dir: Path, configure: Any, needs: str
) -> None:
    """Without file logs and without a logger that reads back, what needs the values is named,
    at launch, before anything is trained or written."""
    training = configure(builder(run_dir, RecordingLogger()).without_file_logs())
    with pytest.raises(ValueError, match="without_file_logs") as caught:
        training.launch(learner(model))
    assert needs in str(caught.value) and "RecordingLogger" in str(caught.value)
    assert "CsvMetricLogger" in str(caught.value)  # the fix
    assert not run_dir.exists()


def test_without_file_logs_allowed_when_nothing_reads(model: TinyRegressor, run_dir: Path) -> None:
    """Keeping the last checkpoints reads no metric: a write-only logger is enough."""
    recorder = RecordingLogger()
    result = (
        builder(run_dir, recorder)
        .without_file_logs()
        .with_default_checkpointers()
        .with_checkpointing_strategy(KeepLastNCheckpoints(1))
        .launch(learner(model))
    )
    assert result.error is None, result.traceback
    assert recorder.values and not (run_dir / "train").exists()


def test_a_logger_failing_at_start_stops_the_launch(model: TinyRegressor, run_dir: Path) -> None:
    """start's error (an unreachable tracker) is raised by launch before training; every
    logger is closed."""

    class Unreachable(RecordingLogger):
        def start(self, config: Mapping[str, Any]) -> None:
            raise ConnectionError("tracker at http://127.0.0.1:9 is unreachable")

    failing, other = Unreachable(), RecordingLogger()
    with pytest.raises(ConnectionError, match=r"127\.0\.0\.1:9"):
        builder(run_dir, other, failing).launch(learner(model))
    assert other.values == [] and other.closed == 1 and failing.closed == 1
    assert not (run_dir / "train").exists()


def test_hparams_refuses_what_json_cannot_hold(run_dir: Path) -> None:
    """A value that is not JSON-able is refused at the call, naming the key."""
    training = builder(run_dir)
    with pytest.raises(ValueError, match=r"hparams\['device'\] is not JSON-able"):
        training.hparams({"device": torch.device("cpu")})
    with pytest.raises(ValueError, match=r"hparams\['rate'\]"):
        training.hparams({"rate": float("nan")})
    with pytest.raises(TypeError, match="keys must be strings"):
        training.hparams({1: "one"})  # type: ignore[dict-item]
    assert training.hparams({"a": [1, 2]}).hparams({"b": None}).config.hparams == {
        "a": [1, 2],
        "b": None,
    }
