"""The artifacts a logger asks for (``wanted_artifacts``): the best checkpoint's export and the
curves PNG, written at the end of the run and handed to every logger's end; requests the run
could not meet refused at the call or at launch, before training."""

from __future__ import annotations

import io
from collections.abc import Collection
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ember import NonFiniteLossError, TrainingError
from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    Learner,
    LossMetric,
    MLflowLogger,
    SupervisedTraining,
    load_checkpoint,
)
from ember.train._logger.base import check_artifacts
from tests.train.fixtures import TinyRegressor, loader, weight
from tests.train.logger.test_protocol import RecordingLogger


class AskingLogger(RecordingLogger):
    """A recording logger that asks for files the run writes only when asked."""

    def __init__(self, *wanted: str) -> None:
        super().__init__()
        self.wanted = wanted

    def wanted_artifacts(self) -> Collection[str]:
        return self.wanted


def builder(directory: Path, *loggers: RecordingLogger) -> SupervisedTraining:
    training = (
        SupervisedTraining(directory, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .num_epochs(3)
        .renderer(CliMetricsRenderer(io.StringIO()))
    )
    for logger in loggers:
        training = training.with_metric_logger(logger)
    return training


def learner(model: TinyRegressor, lr: float = 0.05) -> Learner[TinyRegressor]:
    return Learner(model, torch.optim.SGD(model.parameters(), lr=lr), lr)


def test_asked_for_artifacts_reach_every_logger(model: TinyRegressor, run_dir: Path) -> None:
    """The best epoch's weights exported and the curves drawn at the end; every logger gets
    their paths (the one that asked and one that did not), beside config and summary."""
    matplotlib_image = pytest.importorskip("matplotlib.image")
    asking, other = AskingLogger("model", "curves"), RecordingLogger()
    assert not hasattr(other, "wanted_artifacts")  # it asks for nothing (Logger's default)
    result = (
        builder(run_dir, asking, other)
        .summary()
        .with_default_checkpointers()
        .launch(learner(model))
    )
    assert result.error is None, result.traceback
    expected = {
        "config": run_dir / "config.json",
        "summary": run_dir / "summary.json",
        "model": run_dir / "model.safetensors",
        "curves": run_dir / "metrics.png",
    }
    for recorder in (asking, other):
        assert recorder.ended is not None and recorder.ended[1] == expected

    assert result.best_epoch is not None
    best = load_checkpoint(run_dir, "best", into=TinyRegressor())
    exported = load_file(run_dir / "model.safetensors")
    assert exported.keys() == best.state_dict().keys()
    for name, tensor in best.state_dict().items():
        assert torch.equal(exported[name], tensor), name
    image = matplotlib_image.imread(run_dir / "metrics.png")
    assert image.shape[0] > 0 and image.shape[1] > 0


def test_the_last_epoch_without_a_metric_strategy(model: TinyRegressor, run_dir: Path) -> None:
    """Checkpoints kept without a metric to rank them: the last epoch is exported."""
    asking = AskingLogger("model")
    result = (
        builder(run_dir, asking)
        .with_default_checkpointers()
        .with_checkpointing_strategy(KeepLastNCheckpoints(2))
        .launch(learner(model))
    )
    assert result.error is None, result.traceback
    assert asking.ended is not None and set(asking.ended[1]) == {"config", "model"}
    exported = load_file(run_dir / "model.safetensors")
    for name, tensor in model.state_dict().items():  # the trained model: the last epoch
        assert torch.equal(exported[name], tensor), name


def test_nothing_is_written_unasked(model: TinyRegressor, run_dir: Path) -> None:
    """A run whose loggers ask for nothing writes neither file."""
    recorder = RecordingLogger()
    result = builder(run_dir, recorder).with_default_checkpointers().launch(learner(model))
    assert result.error is None, result.traceback
    assert not (run_dir / "model.safetensors").exists()
    assert not (run_dir / "metrics.png").exists()
    assert recorder.ended is not None and set(recorder.ended[1]) == {"config"}


def test_no_checkpoints_for_the_model_is_refused_at_launch(
    model: TinyRegressor, run_dir: Path
) -> None:
    """'model' without checkpointers: refused before training, saying what to call."""
    with pytest.raises(ValueError, match=r"'model' artifact.*with_default_checkpointers"):
        builder(run_dir, AskingLogger("model")).launch(learner(model))
    assert not run_dir.exists()


def test_no_file_logs_for_the_curves_is_refused_at_launch(
    model: TinyRegressor, run_dir: Path
) -> None:
    """'curves' without the file logs they are drawn from: refused before training."""
    pytest.importorskip("matplotlib")
    training = builder(run_dir, AskingLogger("curves")).without_file_logs()
    with pytest.raises(ValueError, match=r"'curves' artifact.*without_file_logs"):
        training.launch(learner(model))
    assert not run_dir.exists()


def test_unknown_names_are_refused(model: TinyRegressor, run_dir: Path) -> None:
    """At MLflowLogger's call (before mlflow is imported) and, for any logger, at launch."""
    with pytest.raises(ValueError, match=r"unknown artifact 'weights'; choose from 'model'"):
        MLflowLogger(artifacts=("weights",))
    with pytest.raises(TypeError, match="collection of names"):
        check_artifacts("model")
    assert check_artifacts(["model", "model"]) == ("model",)
    with pytest.raises(ValueError, match="unknown artifact 'best'"):
        builder(run_dir, AskingLogger("best")).launch(learner(model))
    assert not run_dir.exists()


def test_curves_need_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without matplotlib, asking for the curves says what to install, at the call."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "matplotlib" else real(name, *args),
    )
    with pytest.raises(ImportError, match=r"pip install ember\[plot\]"):
        check_artifacts(("curves",))


def test_a_run_failing_before_any_checkpoint_still_ends(
    model: TinyRegressor, run_dir: Path
) -> None:
    """A NaN loss in the first epoch: no checkpoint to export; the run's error is the loss's,
    and the loggers still get end (without the model) and close."""

    def poison(batch: object) -> None:
        with torch.no_grad():
            weight(model).fill_(float("nan"))

    model.on_train_step = poison
    asking = AskingLogger("model")
    with pytest.raises(TrainingError) as raised:
        builder(run_dir, asking).with_default_checkpointers().launch(learner(model))
    assert isinstance(raised.value.result.error, NonFiniteLossError)
    assert raised.value.__cause__ is raised.value.result.error
    assert asking.ended is not None and set(asking.ended[1]) == {"config"}
    assert asking.closed == 1 and not (run_dir / "model.safetensors").exists()
