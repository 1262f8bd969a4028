"""`ember digits`: real data reaches >= 95% validation accuracy with the default epochs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from ember.app.cli import main
from ember.app.digits import (
    DEFAULT_EPOCHS,
    TEST_SIZE,
    VALID_SIZE,
    DigitsMlp,
    load_digits,
    load_digits_with_test,
)
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


def test_digits_test_trains_keeps_the_best_and_prints_the_test_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`ember digits --test`: train/valid/test split, the best epoch evaluated on the test set,
    its table printed and written; `ember export` then writes that epoch's weights."""
    directory = tmp_path / "digits-test"
    assert main(["digits", "--test", "--dir", str(directory), "--epochs", "4"]) == 0
    out = capsys.readouterr().out
    assert "Starting evaluation with 1 test(s)." in out
    assert f"Starting test 'test' with {TEST_SIZE} items." in out
    assert "| Test | Metric       | Value    |" in out
    assert "| test | Accuracy (%) | " in out
    summary = json.loads((directory / "test" / "summary.json").read_text(encoding="utf-8"))
    values = {row["metric"]: row["value"] for row in summary["tests"]}
    assert set(values) == {"Accuracy", "Loss"}
    assert "Test accuracy of epoch " in out and f"{values['Accuracy']:.2f} %" in out
    log = (directory / "test" / "test" / "Accuracy.log").read_text(encoding="utf-8")
    assert NumericEntry.parse(log.splitlines()[-1]).value == values["Accuracy"]

    output = tmp_path / "model.safetensors"
    assert main(["export", str(directory), "-o", str(output)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert set(load_file(output)) == set(DigitsMlp().state_dict())
    assert main(["export", str(directory), "--epoch", "1", "-o", str(tmp_path / "x")]) == 2
    assert "no checkpoint of epoch 1" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_three_way_split_is_disjoint() -> None:
    train, valid, test = load_digits_with_test()
    assert len(valid) == VALID_SIZE and len(test) == TEST_SIZE
    assert len(train) + len(valid) + len(test) == 1797
    assert [d.label for d in valid] == [d.label for d in load_digits()[1]]
    seen = {tuple(d.pixels.tolist()) for d in test}
    assert not any(tuple(d.pixels.tolist()) in seen for d in train[:200])


def test_a_failed_digits_training_exits_1_naming_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training that fails stops the command with exit code 1 and the error on stderr (the
    CLI follows launch's default: TrainingError, not a result to remember to read)."""

    def broken(self: DigitsMlp, batch: object) -> None:
        raise RuntimeError("a broken step")

    monkeypatch.setattr(DigitsMlp, "train_step", broken)
    assert main(["digits", "--dir", str(tmp_path / "digits"), "--epochs", "1"]) == 1
    out, err = capsys.readouterr()
    assert "Training failed: RuntimeError: a broken step (ember: the traceback is in" in out
    assert "ember digits: training failed after 0 complete epoch(s), with the RuntimeError" in err
    assert "errors_in_result()" in err


def test_ember_eval_still_runs_the_demo_and_names_its_new_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 15: `ember eval DIR`-style use read as "evaluate this run"; the command is
    now `ember digits --test`. `ember eval` still runs it for one minor release, saying on
    stderr that it is deprecated, what replaces it and where evaluating a run of one's own is
    documented; a rerun replaces its own earlier run (the old marker), and `digits --test`
    refuses a directory `ember eval` made (another command's run)."""
    directory = tmp_path / "eval"
    for _ in range(2):
        assert main(["eval", "--dir", str(directory), "--epochs", "1"]) == 0
        captured = capsys.readouterr()
        assert "ember eval: deprecated, removed in ember 0.3" in captured.err
        assert "now `ember digits --test`" in captured.err
        assert 'docs/training.md, "A finished run, later"' in captured.err
        assert "Test accuracy of epoch 1" in captured.out
    assert (directory / ".ember-eval").exists()
    assert main(["digits", "--test", "--dir", str(directory), "--epochs", "1"]) == 2
    assert "is not an earlier `ember digits --test` run" in capsys.readouterr().err
    training = (Path(__file__).parents[2] / "docs" / "training.md").read_text(encoding="utf-8")
    assert "### A finished run, later" in training
