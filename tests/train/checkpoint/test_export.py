"""A run's best weights after training: the result, load_checkpoint, export_weights, with_test."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from ember import CheckpointError
from ember._rundir.metric_logs import epoch_value
from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    Learner,
    LearningResult,
    LossMetric,
    SupervisedTraining,
    export_weights,
    load_checkpoint,
)
from ember.train._checkpoint.export import CheckpointEpoch
from ember.train._logger.file import FileMetricLogger
from ember.train._vocabulary import Split
from tests.train.fixtures import TinyRegressor, loader, weight


def train(directory: Path, epochs: int = 4, **options: object) -> LearningResult[TinyRegressor]:
    torch.manual_seed(0)
    model = TinyRegressor()
    builder = (
        SupervisedTraining(directory, loader(24, 4, shuffle=1), loader(10, 4, seed=5))
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_default_checkpointers()
        .num_epochs(epochs)
    )
    if options.get("keep_last"):
        builder = builder.with_checkpointing_strategy(KeepLastNCheckpoints(2))
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.3), 0.3))
    assert result.error is None, result.traceback
    return result


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LearningResult[TinyRegressor]]:
    directory = tmp_path_factory.mktemp("export") / "run"
    return directory, train(directory)


def valid_losses(directory: Path, epochs: int) -> list[float]:
    logger = FileMetricLogger(directory)
    values = [epoch_value(logger.read_numeric("Loss", e, Split.VALID)) for e in range(1, 5)]
    logger.close()
    return [v for v in values if v is not None][:epochs]


def test_the_result_names_the_best_epoch_and_the_checkpoints(
    run: tuple[Path, LearningResult[TinyRegressor]],
) -> None:
    directory, result = run
    losses = valid_losses(directory, 4)
    assert result.best_epoch == 1 + losses.index(min(losses))
    checkpoint = directory / "checkpoint"
    assert result.best_epoch in result.checkpoints
    assert result.checkpoints[4] == checkpoint / "model-4.safetensors"
    assert all(path.exists() for path in result.checkpoints.values())


def test_load_checkpoint_best_last_and_by_number(
    run: tuple[Path, LearningResult[TinyRegressor]],
) -> None:
    directory, result = run
    assert result.best_epoch is not None
    cases: list[tuple[CheckpointEpoch, int]] = [("best", result.best_epoch), ("last", 4), (3, 3)]
    for which, epoch in cases:
        model = load_checkpoint(directory, which, into=TinyRegressor())
        stored = load_file(directory / "checkpoint" / f"model-{epoch}.safetensors")
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, stored[name]), (which, name)
    last = load_checkpoint(directory / "checkpoint", "last", into=TinyRegressor())
    assert torch.equal(weight(last), weight(result.model))  # the final weights


def test_bad_checkpoints_are_named(tmp_path: Path, run: tuple[Path, LearningResult[Any]]) -> None:
    directory = run[0]
    with pytest.raises(CheckpointError, match="no run or checkpoint directory"):
        load_checkpoint(tmp_path / "nothing", into=TinyRegressor())
    with pytest.raises(
        CheckpointError, match=r"no checkpoint of epoch 9 .*checkpointed epochs: \[3, 4\]"
    ):
        load_checkpoint(directory, 9, into=TinyRegressor())
    with pytest.raises(ValueError, match="'best', 'last'"):
        load_checkpoint(directory, "first", into=TinyRegressor())  # type: ignore[arg-type]

    class Wider(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 1)

    wider = Wider()
    before = weight(wider).detach().clone()
    with pytest.raises(CheckpointError, match=r"model-4\.safetensors.*'linear\.weight'"):
        load_checkpoint(directory, "last", into=wider)
    assert torch.equal(weight(wider), before)  # left unchanged


def test_a_damaged_file_is_named_and_nothing_is_exported(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    train(directory, epochs=2)
    model_file = directory / "checkpoint" / "model-2.safetensors"
    data = bytearray(model_file.read_bytes())
    data[-1] ^= 0xFF
    model_file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"model-2\.safetensors is damaged"):
        load_checkpoint(directory, 2, into=TinyRegressor())
    with pytest.raises(CheckpointError, match=r"model-2\.safetensors is damaged"):
        export_weights(directory, tmp_path / "out.safetensors", 2)
    assert list(tmp_path.glob("*out.safetensors*")) == []


def test_best_needs_a_metric_strategy(tmp_path: Path) -> None:
    directory = tmp_path / "run"
    result = train(directory, epochs=2, keep_last=True)
    assert result.best_epoch is None
    with pytest.raises(CheckpointError, match="no best epoch"):
        load_checkpoint(directory, "best", into=TinyRegressor())


def test_exported_weights_load_without_ember(
    tmp_path: Path, run: tuple[Path, LearningResult[TinyRegressor]]
) -> None:
    """The file holds model.state_dict()'s keys and loads with safetensors + load_state_dict in
    a process where ember cannot be imported."""
    directory, result = run
    output = tmp_path / "model.safetensors"
    assert export_weights(directory, output, "best") == result.best_epoch
    expected = load_checkpoint(directory, "best", into=TinyRegressor()).state_dict()
    assert set(load_file(output)) == set(expected)
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["ember"] = None  # import ember raises ImportError
        try:
            import ember
        except ImportError:
            pass
        else:
            raise SystemExit("ember is importable")
        import json
        import torch
        from safetensors.torch import load_file
        from torch import nn

        class Plain(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(3, 1)

        model = Plain()
        model.load_state_dict(load_file({str(output)!r}))
        print(json.dumps([model.linear.weight.tolist(), model.linear.bias.tolist()]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    weights, biases = json.loads(done.stdout)
    assert weights == expected["linear.weight"].tolist()
    assert biases == expected["linear.bias"].tolist()


def test_with_test_evaluates_the_best_checkpoint(tmp_path: Path) -> None:
    """with_test: after training, the best epoch's weights on the test set; the values in the
    result, the logs in test/<name>/, the table printed and written."""
    torch.manual_seed(0)
    model = TinyRegressor()
    stream = io.StringIO()
    test = loader(7, 3, seed=9)
    result = (
        SupervisedTraining(tmp_path, loader(24, 4, shuffle=1), loader(10, 4, seed=5))
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(stream))
        .with_default_checkpointers()
        .with_test("test", test)
        .summary()
        .num_epochs(3)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.3), 0.3))
    )
    assert result.error is None, result.traceback
    assert result.evaluation is not None
    best = load_checkpoint(tmp_path, "best", into=TinyRegressor())
    with torch.inference_mode():
        sums = [float(best.inference_step(batch).loss) * len(batch.y) for batch in test]
    assert result.evaluation.value("Loss") == pytest.approx(sum(sums) / 7, rel=1e-6)
    assert torch.equal(weight(result.model), weight(best))
    assert (tmp_path / "test" / "test" / "Loss.log").exists()
    assert (tmp_path / "test" / "summary.json").exists()
    assert (tmp_path / "summary.json").exists()  # the learner's, untouched
    text = stream.getvalue()
    assert "Starting evaluation with 1 test(s)." in text
    assert text.rstrip().endswith(str(result.evaluation))


def test_with_test_bad_input(tmp_path: Path) -> None:
    training = SupervisedTraining(tmp_path, loader(8), loader(4))
    with pytest.raises(ValueError, match="plain directory name"):
        training.with_test("a/b", loader(4))
    with pytest.raises(ValueError, match="'best', 'last'"):
        training.with_test("test", loader(4), checkpoint="top")  # type: ignore[arg-type]
    training.with_test("test", loader(4))
    with pytest.raises(ValueError, match="one checkpoint"):
        training.with_test("other", loader(4), checkpoint="last")
    model = TinyRegressor()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1)
    with pytest.raises(ValueError, match="valid split's metrics"):
        training.launch(learner)
    with pytest.raises(ValueError, match="with_default_checkpointers"):
        training.metrics(LossMetric()).launch(learner)
    assert not (tmp_path / "experiment.log").exists()


def test_result_evaluate_loads_the_named_epoch(tmp_path: Path) -> None:
    """result.evaluate(checkpoint=2) loads epoch 2 into result.model, then evaluates it."""
    directory = tmp_path / "run"
    result = train(directory, epochs=3, keep_last=True)  # keeps epochs 2 and 3
    test = loader(6, 4, seed=9)
    summary = result.evaluate(
        [("test", test)],
        LossMetric(),
        checkpoint=2,
        renderer=CliMetricsRenderer(io.StringIO()),
        summary=False,
    )
    epoch2 = load_file(directory / "checkpoint" / "model-2.safetensors")
    assert torch.equal(weight(result.model), epoch2["linear.weight"])
    with torch.inference_mode():
        sums = [float(result.model.inference_step(batch).loss) * len(batch.y) for batch in test]
    assert summary.value("Loss") == pytest.approx(sum(sums) / 6, rel=1e-6)
    assert not (directory / "test" / "summary.json").exists()
