"""Checkpoints in the loop: "exact resume", "graceful stop", non-finite loss ("finite only")."""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember._errors import CheckpointError, NonFiniteLossError
from ember.train import (
    CliMetricsRenderer,
    KeepLastNCheckpoints,
    Learner,
    LossMetric,
    MetricEarlyStoppingStrategy,
    StoppingCondition,
    SupervisedTraining,
)
from tests.train.fixtures import Batch, TinyRegressor, loader, read_lines

ROOT = Path(__file__).resolve().parents[2]  # the repository: tests is a package there


class DropoutRegressor(TinyRegressor):
    """Uses the torch RNG every step, so a resume is only exact if the RNG is restored."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Sequential(nn.Linear(3, 8), nn.Dropout(0.3), nn.Linear(8, 1))


def fresh_model() -> DropoutRegressor:
    torch.manual_seed(0)
    return DropoutRegressor()


def run(
    directory: Path,
    epochs: int,
    *,
    workers: int = 0,
    resume: int | str | None = None,
    keep: int = 10,
    model: nn.Module | None = None,
    items: int = 40,
) -> Any:
    model = model if model is not None else fresh_model()
    builder = (
        SupervisedTraining(
            directory,
            loader(items, 4, shuffle=3, workers=workers),
            loader(12, 4, shuffle=5, workers=workers, seed=1),
        )
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_checkpointing_strategy(KeepLastNCheckpoints(keep))
        .with_default_checkpointers()
        .num_epochs(epochs)
        .summary()
    )
    if resume == "latest":
        builder = builder.resume_latest()
    elif isinstance(resume, int):
        builder = builder.checkpoint(resume)
    learner = Learner(model, torch.optim.Adam(model.parameters()), 1e-2)
    result = builder.launch(learner)
    assert result.error is None, result.traceback
    return result, learner


def logs(directory: Path, epochs: int) -> dict[str, list[str]]:
    return {
        f"{split}/{epoch}": read_lines(directory / split / f"epoch-{epoch}" / "Loss.log")
        for split in ("train", "valid")
        for epoch in range(1, epochs + 1)
    }


def assert_same_run(a: tuple[Any, Learner[Any]], b: tuple[Any, Learner[Any]]) -> None:
    (_, learner_a), (_, learner_b) = a, b
    for (name, x), (_, y) in zip(
        learner_a.model.state_dict().items(), learner_b.model.state_dict().items(), strict=True
    ):
        assert torch.equal(x, y), name
    state_a, state_b = learner_a.optimizer.state_dict(), learner_b.optimizer.state_dict()
    for key in state_a["state"]:
        for name, value in state_a["state"][key].items():
            assert torch.equal(value, state_b["state"][key][name]), (key, name)


@pytest.mark.parametrize("workers", [0, 2])
def test_resume_at_every_boundary_is_bit_identical(tmp_path: Path, workers: int) -> None:
    """Stopping after epoch k and resuming gives the weights, optimizer and logs of one run."""
    full = run(tmp_path / "full", 4, workers=workers)
    for k in (1, 2, 3):
        directory = tmp_path / f"resumed-{k}"
        run(directory, k, workers=workers)
        resumed = run(directory, 4, workers=workers, resume=k)
        assert_same_run(full, resumed)
        assert logs(directory, 4) == logs(tmp_path / "full", 4)
        assert resumed[0].summary.metrics == full[0].summary.metrics


def test_resume_twice_in_a_chain(tmp_path: Path) -> None:
    """Resuming at 1, then at 3 (resume_latest), still ends exactly like one run."""
    full = run(tmp_path / "full", 5)
    chained = tmp_path / "chained"
    run(chained, 1)
    run(chained, 3, resume="latest")
    assert_same_run(full, run(chained, 5, resume="latest"))
    assert logs(chained, 5) == logs(tmp_path / "full", 5)


def test_default_strategy_keeps_seed_example_epochs(tmp_path: Path) -> None:
    """Default checkpointers: with a falling valid loss, epochs 2 and 3 remain (the seed's)."""
    model = TinyRegressor()
    result = (
        SupervisedTraining(tmp_path, loader(64, 8), loader(16, 8, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .num_epochs(3)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.05))
    )
    assert result.error is None
    files = sorted(p.name for p in (tmp_path / "checkpoint").iterdir())
    expected = [
        f"{n}-{e}.safetensors" for n in ("model", "optim", "scheduler", "state") for e in (2, 3)
    ]
    assert files == sorted([*expected, "manifest-2.json", "manifest-3.json"])
    assert (tmp_path / "run-end.json").is_file()  # the run's end, in the run directory


def test_missing_checkpoint_is_a_clear_error(tmp_path: Path) -> None:
    """checkpoint(n) for an epoch not on disk raises CheckpointError before training."""
    run(tmp_path, 2)
    with pytest.raises(CheckpointError, match=r"no complete checkpoint of epoch 7.*\[1, 2\]"):
        run(tmp_path, 9, resume=7)


def test_resume_needs_checkpointers(tmp_path: Path) -> None:
    """checkpoint(n) without checkpointers is a ValueError, not a silent fresh start."""
    builder = SupervisedTraining(tmp_path, loader(8), loader(4)).checkpoint(1)
    model = TinyRegressor()
    with pytest.raises(ValueError, match="resuming needs checkpointers"):
        builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))


def test_checkpoint_of_another_model_shape_fails_clearly(tmp_path: Path) -> None:
    """Resuming into a model of another shape ends with a CheckpointError naming the tensor."""
    run(tmp_path, 1)
    torch.manual_seed(0)
    other = TinyRegressor()
    other.linear = nn.Sequential(nn.Linear(3, 5), nn.Dropout(0.3), nn.Linear(5, 1))
    result = (
        SupervisedTraining(tmp_path, loader(40, 4, shuffle=3), loader(12, 4, shuffle=5, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_default_checkpointers()
        .num_epochs(3)
        .checkpoint(1)
        .errors_in_result()
        .launch(Learner(other, torch.optim.Adam(other.parameters()), 1e-2))
    )
    assert isinstance(result.error, CheckpointError)
    assert "linear.0.weight" in str(result.error)


def test_resume_latest_without_checkpoints_starts_fresh(tmp_path: Path) -> None:
    """resume_latest() on an empty directory trains from epoch 1."""
    result, _ = run(tmp_path, 2, resume="latest")
    assert result.last_epoch == 2


def test_resume_latest_skips_a_damaged_checkpoint(tmp_path: Path) -> None:
    """A truncated newest checkpoint is ignored: resume_latest uses the one before it."""
    full = run(tmp_path / "full", 3)
    directory = tmp_path / "damaged"
    run(directory, 2)
    model_file = directory / "checkpoint" / "model-2.safetensors"
    model_file.write_bytes(model_file.read_bytes()[:-7])
    assert_same_run(full, run(directory, 3, resume="latest"))


def test_early_stopping_reason_and_resume(tmp_path: Path) -> None:
    """Early stopping ends with its reason in the result and summary; its state is resumed."""

    def launch(directory: Path, epochs: int, resume: int | None = None) -> Any:
        model = TinyRegressor()
        torch.manual_seed(0)
        model = TinyRegressor()
        builder = (
            SupervisedTraining(directory, loader(16, 4), loader(8, 4, seed=1))
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metrics(LossMetric())
            .with_checkpointing_strategy(KeepLastNCheckpoints(20))
            .with_default_checkpointers()
            .early_stopping(
                MetricEarlyStoppingStrategy(
                    LossMetric(), condition=StoppingCondition.no_improvement_since(2)
                )
            )
            .num_epochs(epochs)
            .summary()
        )
        if resume:
            builder = builder.checkpoint(resume)
        # lr so large that the valid loss gets worse after a few epochs
        return builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.45))

    full = launch(tmp_path / "full", 30)
    assert full.error is None
    assert full.stop_reason is not None and "has not improved since epoch" in full.stop_reason
    assert full.summary.stop_reason == full.stop_reason
    stopped_at = full.last_epoch
    assert stopped_at < 30
    directory = tmp_path / "resumed"
    launch(directory, stopped_at - 1)
    resumed = launch(directory, 30, resume=stopped_at - 1)
    assert (resumed.last_epoch, resumed.stop_reason) == (stopped_at, full.stop_reason)


def test_non_finite_loss_stops_without_checkpointing_it(tmp_path: Path) -> None:
    """A NaN loss in epoch 2 ends training with NonFiniteLossError; epoch 2 is never saved."""
    model = TinyRegressor()
    steps = 0

    def poison(batch: Batch) -> None:
        nonlocal steps
        steps += 1
        if steps == 13:  # epoch 2, iteration 3
            batch.x[0, 0] = float("nan")

    model.on_train_step = poison
    result = (
        SupervisedTraining(tmp_path, loader(40, 4), loader(8, 4, seed=1))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .num_epochs(4)
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.01))
    )
    assert isinstance(result.error, NonFiniteLossError)
    assert "epoch 2, iteration 3" in str(result.error)
    on_disk = sorted(p.name for p in (tmp_path / "checkpoint").glob("manifest-*.json"))
    assert on_disk == ["manifest-1.json"]


CRASH_SCRIPT = """
import sys, torch
from pathlib import Path
from safetensors.torch import save_file
sys.path.insert(0, {root!r})
from tests.train.test_resume import run
directory, out, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
print("started", flush=True)
resume = "latest" if mode == "resume" else None
result, learner = run(directory, 6, keep=2, resume=resume, items=1200)
save_file({{k: v.contiguous() for k, v in learner.model.state_dict().items()}}, out)
print("done", flush=True)
"""


@pytest.mark.parametrize(
    "trials", [pytest.param(3, id="ci"), pytest.param(10, id="full", marks=pytest.mark.slow)]
)
def test_sigkill_at_random_moments_then_resume_latest(tmp_path: Path, trials: int) -> None:
    """SIGKILL at seeded random moments, then resume_latest: final weights equal one run's
    (``trials`` kills; the full property is ``make test-slow``)."""
    from safetensors.torch import load_file

    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(CRASH_SCRIPT.format(root=str(ROOT))))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def train(directory: Path, out: Path, mode: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script), str(directory), str(out), mode],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    reference = train(tmp_path / "reference", tmp_path / "reference.safetensors", "fresh")
    assert reference.stdout is not None
    assert reference.stdout.readline().strip() == "started"
    started = time.monotonic()
    assert reference.wait(timeout=120) == 0
    duration = time.monotonic() - started
    reference.stdout.close()
    expected = load_file(tmp_path / "reference.safetensors")

    rng = random.Random(1234)
    killed = 0
    for trial in range(trials):
        directory, out = tmp_path / f"trial-{trial}", tmp_path / f"trial-{trial}.safetensors"
        victim = train(directory, out, "fresh")
        assert victim.stdout is not None
        assert victim.stdout.readline().strip() == "started"
        try:
            victim.wait(timeout=rng.uniform(0.0, 0.6 * duration))
        except subprocess.TimeoutExpired:
            victim.send_signal(signal.SIGKILL)
        killed += victim.wait() == -signal.SIGKILL
        victim.stdout.close()
        finisher = train(directory, out, "resume")
        assert finisher.wait(timeout=120) == 0, f"trial {trial}"
        assert finisher.stdout is not None
        finisher.stdout.close()
        got = load_file(out)
        for name, tensor in expected.items():
            assert torch.equal(tensor, got[name]), (trial, name)
    assert killed >= trials // 2  # most kill moments fall inside the run, not after it
