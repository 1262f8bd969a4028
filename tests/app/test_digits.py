"""`ember digits`: real data reaches >= 95% validation accuracy with the default epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ember.app.cli import main
from ember.app.digits import DEFAULT_EPOCHS, VALID_SIZE, load_digits
from ember.extend import NumericEntry

pytest.importorskip("sklearn")  # the digits ship with scikit-learn (ember[examples])


def test_digits_reaches_95_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default run ends >= 95% on valid, in its log's final line and in summary.json."""
    directory = tmp_path / "digits"
    assert main(["digits", "--dir", str(directory), "--epochs", str(DEFAULT_EPOCHS)]) == 0
    out = capsys.readouterr().out
    assert "Learner Summary" in out
    assert f"Validation accuracy after epoch {DEFAULT_EPOCHS}: " in out

    log = directory / "valid" / f"epoch-{DEFAULT_EPOCHS}" / "Accuracy.log"
    final = NumericEntry.parse(log.read_text(encoding="utf-8").splitlines()[-1])
    assert final.final
    assert final.value >= 95.0
    assert f"{final.value:.2f} %" in out

    summary = json.loads((directory / "summary.json").read_text(encoding="utf-8"))
    assert summary["epochs"] == DEFAULT_EPOCHS
    rows = {(row["split"], row["name"]): row for row in summary["metrics"]}
    assert set(rows) == {
        ("Train", "Accuracy"),
        ("Train", "Loss"),
        ("Valid", "Accuracy"),
        ("Valid", "Loss"),
    }
    assert rows[("Valid", "Accuracy")]["max_value"] >= 95.0

    # a rerun replaces its own earlier run
    assert main(["digits", "--dir", str(directory), "--epochs", "1"]) == 0
    assert not (directory / "valid" / "epoch-2").exists()


def test_digits_refuses_a_foreign_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Like the demo, it never deletes a directory it did not create."""
    (tmp_path / "mine.txt").write_text("keep")
    assert main(["digits", "--dir", str(tmp_path), "--epochs", "1"]) == 2
    assert "is not an earlier `ember digits` run" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").read_text() == "keep"


def test_split_is_seeded_and_disjoint() -> None:
    """The same seed gives the same split; train and valid cover all 1797 images once."""
    train, valid = load_digits()
    again_train, again_valid = load_digits()
    assert len(valid) == VALID_SIZE and len(train) + len(valid) == 1797
    assert [d.label for d in valid] == [d.label for d in again_valid]
    assert all(
        (a.pixels == b.pixels).all() for a, b in zip(train[:50], again_train[:50], strict=True)
    )
    assert float(train[0].pixels.min()) >= 0.0 and float(train[0].pixels.max()) <= 1.0
