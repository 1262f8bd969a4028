"""``stop_when``: a run stops after the batch whose value reached the threshold, the same one
in every run; a stopped run resumes exactly."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from types import ModuleType

import pytest
import torch

from ember.train import (
    AccuracyMetric,
    CliMetricsRenderer,
    Learner,
    LossMetric,
    SupervisedTraining,
)
from tests.train.fixtures import TinyRegressor, loader, read_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def regression(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    return importlib.import_module("regression")


def test_a_run_stops_once_a_batch_loss_reaches_the_threshold(
    regression: ModuleType, tmp_path: Path
) -> None:
    """examples/regression: stop_reason names the first batch whose Loss reached 1e-3 (every
    batch before it logged more), and the run stopped after it, before its epochs ran out."""
    result = regression.main(["--dir", str(tmp_path)])
    assert result.error is None, result.traceback
    assert result.stop_reason is not None
    assert result.stop_reason.startswith("stop_when: train Loss ")
    values = [
        float(line.split(",")[0])
        for epoch in sorted(p.name for p in (tmp_path / "train").glob("epoch-*"))
        for line in read_lines(tmp_path / "train" / epoch / "Loss.log")
        if not line.endswith(",final")
    ]
    first = next(i for i, value in enumerate(values) if value <= 1e-3)
    assert f"Loss {values[first]!r} <= 0.001" in result.stop_reason
    assert f"step {first + 1})" in result.stop_reason
    assert len(values) == first + 1  # it stops right after that batch, not later
    assert result.last_epoch < 50


def test_stop_when_stops_at_the_same_batch_with_the_same_model_in_every_run(
    tmp_path: Path,
) -> None:
    """Three runs of the same training with a train stop_when stop after the same batch (the
    first whose Loss met it) with bit-identical weights, on a shuffled loader with 2
    workers."""
    ends = []
    for index in range(3):
        torch.manual_seed(0)
        model = TinyRegressor()
        training = (
            SupervisedTraining(tmp_path / str(index), loader(64, 2, shuffle=3, workers=2))
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metric_train_numeric(LossMetric())
            .num_epochs(20)
            .stop_when("Loss", 0.05)
        )
        result = training.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
        assert result.stop_reason is not None
        values = [
            float(line.split(",")[0])
            for epoch in range(1, result.last_epoch + 2)
            if (tmp_path / str(index) / "train" / f"epoch-{epoch}").is_dir()
            for line in read_lines(tmp_path / str(index) / "train" / f"epoch-{epoch}" / "Loss.log")
            if not line.endswith(",final")
        ]
        assert values[-1] <= 0.05 and all(value > 0.05 for value in values[:-1])
        ends.append((result.stop_reason, [p.detach().clone() for p in model.parameters()]))
    assert ends[0][0] == ends[1][0] == ends[2][0]
    for _, params in ends[1:]:
        assert all(torch.equal(a, b) for a, b in zip(ends[0][1], params, strict=True))


def training(directory: Path, epochs: int) -> SupervisedTraining:
    return (
        SupervisedTraining(directory, loader(32, 4, shuffle=1), loader(8))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .num_epochs(epochs)
    )


def test_a_stopped_run_resumes_exactly(tmp_path: Path) -> None:
    """Stopped inside an epoch by stop_when, at a mid-round checkpoint; resumed without it to
    the end: the weights of an uninterrupted run."""
    torch.manual_seed(0)
    model = TinyRegressor()
    stopped = training(tmp_path / "run", 4).stop_when("Loss", 1.0)
    result = stopped.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    assert result.error is None, result.traceback
    assert result.stop_reason is not None and result.stop_reason.startswith("stop_when")
    torch.manual_seed(0)
    resumed = TinyRegressor()
    learner = Learner(resumed, torch.optim.SGD(resumed.parameters(), lr=0.05))
    result = training(tmp_path / "run", 4).resume_latest().launch(learner)
    assert result.error is None, result.traceback
    torch.manual_seed(0)
    straight = TinyRegressor()
    learner = Learner(straight, torch.optim.SGD(straight.parameters(), lr=0.05))
    assert training(tmp_path / "straight", 4).launch(learner).error is None
    for ours, theirs in zip(resumed.parameters(), straight.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_a_validation_value_stops_after_its_epoch(tmp_path: Path) -> None:
    """split="valid" reads each validation's epoch value: the run ends after that epoch."""
    torch.manual_seed(0)
    model = TinyRegressor()
    result = (
        training(tmp_path, 5)
        .stop_when(LossMetric(), 1e9, split="valid")
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    )
    assert result.error is None, result.traceback
    assert result.last_epoch == 1
    assert result.stop_reason is not None and "valid Loss" in result.stop_reason
    assert "(epoch 1)" in result.stop_reason


def test_what_stop_when_cannot_read_is_refused(tmp_path: Path) -> None:
    """A metric not registered on the split (at launch, nothing trained), the test split and a
    threshold that is no number (at the call)."""
    model = TinyRegressor()
    with pytest.raises(ValueError, match=r"stop_when reads the train metric 'Accuracy'"):
        training(tmp_path, 1).stop_when(AccuracyMetric(), 90.0).launch(
            Learner(model, torch.optim.SGD(model.parameters(), lr=0.05))
        )
    assert not (tmp_path / "train").exists()
    with pytest.raises(ValueError, match="split must be 'train' or 'valid'"):
        training(tmp_path, 1).stop_when("Loss", 1.0, split="test")
    with pytest.raises(TypeError, match="threshold must be a real number"):
        training(tmp_path, 1).stop_when("Loss", "low")  # type: ignore[arg-type]
