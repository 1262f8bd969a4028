"""Mid-round checkpoints in LearningCheckpointer (``_checkpoint/mid_round.py``): their files,
the newest point of either kind, and which ones are kept."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from torch import nn

from ember import CheckpointError
from ember.train import KeepLastNCheckpoints, LearningCheckpointer
from ember.train._checkpoint.checkpointer import MidRoundCheckpointer
from ember.train._checkpoint.export import model_checkpoints
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.resume import resume_latest_point
from tests.train.checkpoint.learning.helpers import LossQuery, files_of, make_records


def checkpointer(directory: Path) -> LearningCheckpointer:
    return LearningCheckpointer(directory, KeepLastNCheckpoints(3), asynchronous=False)


def listing(directory: Path) -> list[str]:
    return sorted(str(path.relative_to(directory)) for path in directory.rglob("*"))


def test_a_mid_round_checkpoint_is_a_round_end_layout_in_its_step_directory(
    tmp_path: Path,
) -> None:
    """Step 5 inside round 2: the four files and a manifest, named for the round, in step-5/;
    it restores, and the listing of round-end checkpoints never shows it."""
    model = nn.Linear(2, 1)
    with checkpointer(tmp_path) as saver:
        assert isinstance(saver, MidRoundCheckpointer)
        saver.checkpoint(1, make_records(model, 1), LossQuery({1: 1.0}))
        saver.checkpoint_mid_round(2, 5, make_records(model, 2))
        assert listing(tmp_path / "step-5") == files_of(tmp_path, [2])
        restored = saver.restore_mid_round(2, 5)
        assert restored.state.metadata["epoch"] == 2
        assert saver.latest_complete_point() == ResumePoint(2, 5)
        assert saver.complete_epochs() == [1]
    assert sorted(model_checkpoints(tmp_path)) == [1]


def test_only_the_newest_mid_round_checkpoint_is_kept_until_a_round_end_passes_it(
    tmp_path: Path,
) -> None:
    """Each mid-round checkpoint removes the one before; a round end saved removes those of its
    round and before, not a newer one (kept by a stop after a round end, say)."""
    model = nn.Linear(2, 1)
    with checkpointer(tmp_path) as saver:
        saver.checkpoint_mid_round(1, 2, make_records(model, 1))
        saver.checkpoint_mid_round(1, 4, make_records(model, 1))
        assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-4"]
        saver.checkpoint(1, make_records(model, 1), LossQuery({1: 1.0}))
        assert list(tmp_path.glob("step-*")) == []
        saver.checkpoint_mid_round(2, 7, make_records(model, 2))
        saver.save(1, saver.checkpoint(1, make_records(model, 1), LossQuery({1: 1.0})))
        assert sorted(p.name for p in tmp_path.glob("step-*")) == ["step-7"]
        assert saver.latest_complete_point() == ResumePoint(2, 7)


def test_points_are_ordered_by_when_they_were_taken() -> None:
    points = [ResumePoint(2), ResumePoint(3, 9), ResumePoint(2, 4), ResumePoint(3), ResumePoint(1)]
    ordered = sorted(points, key=lambda point: point.order)
    assert ordered == [
        ResumePoint(1),
        ResumePoint(2, 4),
        ResumePoint(2),
        ResumePoint(3, 9),
        ResumePoint(3),
    ]
    assert [p.starting_epoch for p in ordered] == [2, 2, 3, 3, 4]
    assert str(ResumePoint(3, 9)) == "step 9 (in epoch 3)"


def test_resume_latest_skips_a_damaged_mid_round_checkpoint_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = nn.Linear(2, 1)
    with checkpointer(tmp_path) as saver:
        saver.checkpoint(1, make_records(model, 1), LossQuery({1: 1.0}))
        saver.checkpoint_mid_round(2, 6, make_records(model, 2))
        (tmp_path / "step-6" / "optim-2.safetensors").write_bytes(b"damaged")
        with caplog.at_level(logging.WARNING, logger="ember.train"):
            assert resume_latest_point(saver, fresh_if_unusable=False) == ResumePoint(1)
    assert "skips the checkpoint of step 6 (in epoch 2)" in caplog.text
    assert "optim-2.safetensors is damaged" in caplog.text


def test_bad_mid_round_requests_are_clear_errors(tmp_path: Path) -> None:
    with checkpointer(tmp_path) as saver:
        with pytest.raises(CheckpointError, match="no complete mid-round checkpoint at step 3"):
            saver.restore_mid_round(1, 3)
        with pytest.raises(ValueError, match="step must be >= 1, got 0"):
            saver.checkpoint_mid_round(1, 0, make_records(nn.Linear(2, 1), 1))
