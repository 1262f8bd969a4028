"""The demo (ember's main job): the hand loop and the Learner agree bit for bit ("same batches")."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.app.cli import main
from ember.app.demo import format_report, run_demo


@pytest.mark.parametrize(("workers", "shuffle"), [(0, None), (2, None), (0, 7), (2, 7)])
def test_all_losses_bit_identical(tmp_path: Path, workers: int, shuffle: int | None) -> None:
    """Default, --workers 2, --shuffle 7 (and both) give identical losses for all 21 steps."""
    report = run_demo(tmp_path / "run", workers=workers, shuffle=shuffle)
    assert report.result.error is None
    assert len(report.hand) == 21
    assert report.identical
    text = format_report(report, tmp_path / "run")
    assert "all 21 losses bit-identical: true" in text
    assert "Learner Summary" in text


def test_cli_demo_exit_code_and_listing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ember demo` exits 0 and lists the run directory with sizes."""
    directory = tmp_path / "demo"
    assert main(["demo", "--epochs", "2", "--dir", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "all 14 losses bit-identical: true" in out
    assert f"{directory / 'train' / 'epoch-2' / 'Loss.log'}" in out
    assert main(["demo", "--epochs", "1", "--dir", str(directory)]) == 0  # reruns replace


def test_cli_demo_refuses_foreign_directory(tmp_path: Path) -> None:
    """The demo never deletes a directory it did not create."""
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["demo", "--dir", str(tmp_path)]) == 2
    assert (tmp_path / "mine.txt").read_text() == "keep"
