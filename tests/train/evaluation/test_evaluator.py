"""The Evaluator: metric values over whole test sets, its files, its lines and bad input."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from ember._rundir.metric_logs import NumericEntry
from ember.train import (
    CliMetricsRenderer,
    EvaluationSummary,
    EvaluatorBuilder,
    Learner,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TopKAccuracyMetric,
    load_checkpoint,
)
from ember.train._metric.base import MetricEntry, MetricMetadata
from ember.train._metric.loss import LossInput
from tests.train.fixtures import Batch, TinyRegressor, loader, samples


class PerSample(TinyRegressor):
    """Per-sample losses: the Loss metric then weighs each batch by its items."""

    def inference_step(self, batch: Batch) -> RegressionOutput:
        out = self(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y, reduction="none")[:, 0], out, batch.y)


class Empty:
    """A loader of no item (ember's own refuse to be built empty; a user's may not)."""

    def __getattr__(self, name: str) -> object:
        return getattr(loader(1), name)

    def num_items(self) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    def __iter__(self) -> object:
        return iter(())


def builder(directory: Path, stream: io.StringIO | None = None) -> EvaluatorBuilder:
    renderer = CliMetricsRenderer(stream or io.StringIO(), interval=1e9)
    return EvaluatorBuilder(directory).renderer(renderer)


def hand_mse(model: TinyRegressor, count: int, seed: int = 0) -> float:
    """The MSE over every item at once: what a test's Loss must be, whatever the batches."""
    rows = samples(count, seed)
    x = torch.tensor([row[0] for row in rows])
    y = torch.tensor([[row[1]] for row in rows])
    with torch.inference_mode():
        return float(F.mse_loss(model(x), y, reduction="sum") / count)


def test_loss_equals_a_hand_computation_over_the_whole_test_set(tmp_path: Path) -> None:
    """10 items in batches of 4 (a last batch of 2): the logged final Loss and the summary's
    value are the mean over the 10 items, not over the 3 batch means."""
    torch.manual_seed(0)
    model = PerSample()
    summary = builder(tmp_path).metrics(LossMetric()).build(model).eval("test", loader(10, 4))
    expected = hand_mse(model, 10)
    assert summary.value("Loss") == pytest.approx(expected, rel=1e-6)
    lines = (tmp_path / "test" / "test" / "Loss.log").read_text(encoding="utf-8").splitlines()
    entries = [NumericEntry.parse(line) for line in lines]
    assert [entry.weight for entry in entries[:-1]] == [4, 4, 2]
    assert entries[-1].final and entries[-1].value == pytest.approx(expected, rel=1e-6)


def test_a_scalar_loss_is_the_per_item_mean_as_in_training(tmp_path: Path) -> None:
    """As for validation: a reduced loss weighs its batch's items (10 items in batches of 4:
    the last batch of 2 weighs 2)."""
    torch.manual_seed(0)
    model = TinyRegressor()
    test = loader(10, 4)
    summary = builder(tmp_path).metrics(LossMetric()).build(model).eval("test", test)
    with torch.inference_mode():
        sums = [float(model.inference_step(b).loss) * len(b.y) for b in test]
    assert summary.value("Loss") == pytest.approx(sum(sums) / 10, rel=1e-6)


@settings(max_examples=15, deadline=None)
@given(count=st.integers(1, 23), batch_size=st.integers(1, 9))
def test_loss_is_the_whole_set_mean_for_any_batching(
    tmp_path_factory: pytest.TempPathFactory, count: int, batch_size: int
) -> None:
    torch.manual_seed(1)
    model = PerSample()
    directory = tmp_path_factory.mktemp("eval")
    evaluator = builder(directory).metrics(LossMetric()).build(model)
    summary = evaluator.eval("test", loader(count, batch_size))
    assert summary.value("Loss") == pytest.approx(hand_mse(model, count), rel=1e-5, abs=1e-7)


def test_layout_lines_summary_and_mode(tmp_path: Path) -> None:
    """eval_all: one directory per test, Burn's lines, the summary printed and written; the
    model ends in the mode it had; eval-worker does not outlive the call."""
    torch.manual_seed(0)
    model = PerSample()
    model.train()
    stream = io.StringIO()
    evaluator = builder(tmp_path, stream).metrics(LossMetric()).summary().build(model)
    summary = evaluator.eval_all([("test", loader(10, 4)), ("hard", loader(5, 2, seed=3))])
    assert model.training
    assert not any(t.name == "eval-worker" for t in threading.enumerate())
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.log")) == [
        "evaluation.log",
        "test/hard/Loss.log",
        "test/test/Loss.log",
    ]
    assert [(row.test, row.metric) for row in summary.values] == [
        ("test", "Loss"),
        ("hard", "Loss"),
    ]
    assert summary.value("Loss", "hard") == pytest.approx(hand_mse(model, 5, 3), rel=1e-6)
    written = json.loads((tmp_path / "test" / "summary.json").read_text(encoding="utf-8"))
    assert EvaluationSummary.from_json(written) == summary
    lines = stream.getvalue().splitlines()
    assert lines[0] == "Starting evaluation with 2 test(s)."
    assert lines[1] == "Starting test 'test' with 10 items."
    assert "Starting test 'hard' with 5 items." in lines
    assert any(line.startswith("[test hard] 5/5 items (100%) · Loss ") for line in lines)
    assert any(line.startswith("Test ended.  Loss ") for line in lines)
    assert "Evaluation ended." in lines
    table = str(summary).splitlines()
    assert table[0] == "=" * 24 + " Evaluation Summary " + "=" * 24
    assert table[1] == "| Test | Metric | Value    |"
    assert table[2] == "|------|--------|----------|"
    assert stream.getvalue().rstrip().endswith(str(summary))


def test_classification_metrics_match_torch(tmp_path: Path) -> None:
    """A second metric kind over an uneven last batch: top-2 accuracy of 11 items."""
    from ember.train import ClassificationOutput, LearnerModel, TrainOutput

    class Classifier(LearnerModel):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(3, 4)

        def inference_step(self, batch: Batch) -> ClassificationOutput:
            scores = self.linear(batch.x)
            targets = (batch.y[:, 0] > 0).long() + (batch.y[:, 0] > 1).long()
            return ClassificationOutput(F.cross_entropy(scores, targets), scores, targets)

        def train_step(self, batch: Batch) -> TrainOutput[ClassificationOutput]:
            raise NotImplementedError

    torch.manual_seed(0)
    model = Classifier()
    test = loader(11, 4)
    summary = builder(tmp_path).metrics(TopKAccuracyMetric(2)).build(model).eval("t", test)
    hits = total = 0
    with torch.inference_mode():
        for batch in test:
            out = model.inference_step(batch)
            top = out.output.topk(2, dim=1).indices
            hits += int((top == out.targets[:, None]).any(dim=1).sum())
            total += len(out.targets)
    assert total == 11
    assert summary.value("Top-K Accuracy @ TopK(2)", "t") == pytest.approx(100 * hits / total)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "a\\b"])
def test_bad_names_are_refused_before_anything_is_written(tmp_path: Path, name: str) -> None:
    evaluator = builder(tmp_path / "run").metrics(LossMetric()).build(TinyRegressor())
    with pytest.raises(ValueError, match="plain directory name"):
        evaluator.eval(name, loader(4))
    assert not (tmp_path / "run").exists()


def test_other_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one metric"):
        EvaluatorBuilder(tmp_path).build(TinyRegressor())
    evaluator = builder(tmp_path / "run").metrics(LossMetric()).build(TinyRegressor())
    with pytest.raises(ValueError, match="empty"):
        evaluator.eval("test", Empty())  # type: ignore[arg-type]  # duck-typed, on purpose
    with pytest.raises(ValueError, match="given twice"):
        evaluator.eval_all([("a", loader(2)), ("a", loader(2))])
    with pytest.raises(ValueError, match="tests is empty"):
        evaluator.eval_all([])
    with pytest.raises(TypeError, match="DataLoader"):
        evaluator.eval("test", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="already registered"):
        EvaluatorBuilder(tmp_path).metrics(LossMetric(), LossMetric())
    with pytest.raises(TypeError, match="renderer"):
        EvaluatorBuilder(tmp_path).renderer(object())  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()


def test_a_directory_that_is_no_path_is_named(tmp_path: Path) -> None:
    """Issue 29, item 10: EvaluatorBuilder(123) says what the argument is and must be (it gave
    pathlib's bare "expected str, bytes or os.PathLike object, not int"); a file is refused."""
    with pytest.raises(
        TypeError,
        match=r"directory must be a str or a path \(where the evaluation writes its logs\), "
        r"got 123 \(int\)",
    ):
        EvaluatorBuilder(123)  # type: ignore[arg-type]  # the mistake under test
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="directory is a file, not a directory"):
        EvaluatorBuilder(tmp_path / "file")


def test_a_failing_step_is_raised_and_the_thread_ends(tmp_path: Path) -> None:
    class Broken(TinyRegressor):
        def inference_step(self, batch: Batch) -> RegressionOutput:
            raise RuntimeError("broken step")

    stream = io.StringIO()
    evaluator = builder(tmp_path, stream).metrics(LossMetric()).build(Broken())
    with pytest.raises(RuntimeError, match="broken step"):
        evaluator.eval("test", loader(4))
    assert not any(t.name == "eval-worker" for t in threading.enumerate())
    assert "Training failed: RuntimeError: broken step" in stream.getvalue()


def test_a_failing_metric_writes_no_summary(tmp_path: Path) -> None:
    """The metrics thread fails: the error is raised, no summary.json is written."""

    class Failing(LossMetric):
        def update(self, item: LossInput, metadata: MetricMetadata) -> MetricEntry:
            raise ValueError("metric failed")

    evaluator = builder(tmp_path).metrics(Failing()).summary().build(TinyRegressor())
    with pytest.raises(ValueError, match="metric failed"):
        evaluator.eval_all([("a", loader(4)), ("b", loader(4))])
    assert not (tmp_path / "test" / "summary.json").exists()
    assert not (tmp_path / "test" / "b").exists()  # stopped after the first test


def test_evaluation_runs_under_the_training_precision(tmp_path: Path) -> None:
    """EvaluatorBuilder.precision("bf16-mixed"): inference_step runs under autocast."""
    seen: list[bool] = []

    class Watching(TinyRegressor):
        def inference_step(self, batch: Batch) -> Any:
            seen.append(torch.is_autocast_enabled("cpu"))
            return super().inference_step(batch)

    evaluator = (
        EvaluatorBuilder(tmp_path)
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .precision("bf16-mixed")
        .build(Watching())
    )
    evaluator.eval("test", loader(8, 4))
    assert seen == [True, True]
    with pytest.raises(ValueError, match="precision must be one of"):
        EvaluatorBuilder(tmp_path).precision("fp8")  # type: ignore[arg-type]


def test_a_finished_run_s_best_checkpoint_evaluates_as_documented(tmp_path: Path) -> None:
    """Issue 29, item 15 ("ember eval DIR" is not "evaluate this run"): docs/training.md, "A
    finished run, later", as written: load_checkpoint(DIR, "best") into a fresh model and an
    EvaluatorBuilder on DIR. The Loss is the best epoch's weights' MSE on the test set; the
    files go to DIR/test/ and the run's own summary.json is left as it was."""
    directory = tmp_path / "run"
    torch.manual_seed(0)
    trained = PerSample()
    result = (
        SupervisedTraining(directory, loader(24, 4, shuffle=1), loader(10, 4, seed=5))
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_default_checkpointers()
        .summary()
        .num_epochs(4)
        .launch(Learner(trained, torch.optim.SGD(trained.parameters(), lr=0.3), 0.3))
    )
    assert result.error is None and result.best_epoch is not None
    run_summary = (directory / "summary.json").read_bytes()

    model = load_checkpoint(directory, "best", into=PerSample())  # the documented lines
    summary = (
        EvaluatorBuilder(directory)
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .summary()
        .build(model)
        .eval("test", loader(9, 4, seed=3))
    )
    best = load_file(directory / "checkpoint" / f"model-{result.best_epoch}.safetensors")
    assert all(torch.equal(t, best[name]) for name, t in model.state_dict().items())
    assert summary.value("Loss") == pytest.approx(hand_mse(model, 9, seed=3), rel=1e-6)
    assert (directory / "test" / "test" / "Loss.log").exists()
    assert (directory / "test" / "summary.json").exists()
    assert (directory / "summary.json").read_bytes() == run_summary
