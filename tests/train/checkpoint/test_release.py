"""Checkpoints written by the previous release (``data/release/``, see its README) resume under
the current code exactly: the weights and every ``Loss.log`` line of an uninterrupted run (the
epochs the release began logged as it logged them: each batch weighing 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from ember._rundir.metric_logs import format_number
from tests.train.checkpoint.release_run import EPOCHS, train

DATA = Path(__file__).resolve().parent / "data" / "release"


def logs(directory: Path) -> dict[str, str]:
    """Every metric log of a run, by its path in the run directory."""
    return {
        str(path.relative_to(directory)): path.read_text(encoding="utf-8")
        for split in ("train", "valid")
        for path in sorted((directory / split).rglob("*.log"))
    }


def per_batch(log: str) -> str:
    """A ``Loss.log`` as ember 0.2 wrote it: each batch weighing 1, the epoch value the plain
    mean of the batch values."""
    values = [line.split(",")[0] for line in log.splitlines()[:-1]]
    total = 0.0
    for value in values:
        total += float(value)
    lines = [f"{value},1" for value in values] + [f"{format_number(total / len(values))},final"]
    return "".join(f"{line}\n" for line in lines)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    directory = tmp_path_factory.mktemp("uninterrupted") / "run"
    result = train(directory)
    assert result.error is None and result.last_epoch == EPOCHS
    return directory, result.model


@pytest.mark.parametrize("name", ["rounds", "mid_round"])
def test_a_run_checkpointed_by_the_previous_release_resumes_exactly(
    name: str, tmp_path: Path, uninterrupted: tuple[Path, torch.nn.Module]
) -> None:
    """Resumed from the release's newest checkpoint (a round end, or a step inside epoch 3), the
    run ends with every weight and every log line of the uninterrupted one; the epochs the
    release began weigh each batch 1 as it did (epoch 3 resumed mid-round too), later epochs
    weigh items."""
    directory = tmp_path / name
    shutil.copytree(DATA / name, directory)
    written_before = logs(directory)
    result = train(directory, resume=True)
    assert result.error is None and result.last_epoch == EPOCHS
    reference_directory, reference = uninterrupted
    for (key, mine), (_, theirs) in zip(
        result.model.state_dict().items(), reference.state_dict().items(), strict=True
    ):
        assert torch.equal(mine, theirs), key
    expected = {
        key: per_batch(log) if key in written_before else log
        for key, log in logs(reference_directory).items()
    }
    assert logs(directory) == expected
    assert written_before.keys() <= logs(directory).keys()  # the release's lines were kept
