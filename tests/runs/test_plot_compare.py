"""ember.runs.plot overlays runs (a panel per metric, a colour per run, a legend naming each)
and ember.runs.compare sets them side by side (best and last values, the configuration keys
that differ); ``ember plot`` and ``ember compare`` print them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from ember._table import format_cell
from ember.app.cli import main
from ember.runs import compare, load, plot
from ember.train import IterationSpeedMetric, Learner, LossMetric
from tests.runs.test_run import train
from tests.train.fixtures import TinyRegressor, loader, quiet

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def three_runs(tmp_path: Path) -> list[Path]:
    """Three runs differing in their learning rate (and so in their curves)."""
    directories = [tmp_path / f"lr-{lr}" for lr in (0.1, 0.05, 0.01)]
    for directory, lr in zip(directories, (0.1, 0.05, 0.01), strict=True):
        train(directory, epochs=3, lr=lr)
    return directories


def test_plot_overlays_runs_with_a_colour_and_a_legend_entry_each(tmp_path: Path) -> None:
    """One panel per metric; in it one colour per run (valid solid, train dashed), the legend
    naming each run once; the image is written atomically."""
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    import ember._rundir.curves as drawing
    from ember.runs._plot import _curves

    runs = load(three_runs(tmp_path))
    figure = drawing._draw([_curves(run) for run in runs], ["Loss"])
    (ax,) = [ax for ax in figure.axes if ax.get_visible()]
    colours = [line.get_color() for line in ax.get_lines()]
    assert colours == ["C0", "C0", "C1", "C1", "C2", "C2"]  # train and valid of each run
    assert [line.get_linestyle() for line in ax.get_lines()][:2] == ["--", "-"]
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["lr-0.1", "lr-0.05", "lr-0.01"]
    assert ax.get_title() == "Loss (solid: valid, dashed: train)"
    valid = ax.get_lines()[1]
    assert list(valid.get_ydata()) == list(runs[0].values("valid", "Loss").values())
    output = plot(runs, tmp_path / "out" / "runs.png")
    assert output.read_bytes().startswith(PNG_SIGNATURE) and imread(output).shape[0] > 0
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_plot_of_several_runs_needs_an_output(tmp_path: Path) -> None:
    """Several runs have no directory of their own for the image: output is required."""
    runs = load(three_runs(tmp_path)[:2])
    with pytest.raises(ValueError, match="give the image to write"):
        plot(runs)


def test_compare_gives_best_and_last_and_the_differing_keys(tmp_path: Path) -> None:
    """Per metric and split, each run's best value and its epoch, its last value and epoch;
    then the configuration keys whose values differ (the learning rate), not the directory."""
    runs = load(three_runs(tmp_path))
    text = compare(runs)
    assert "Valid Loss (lower is better)" in text and "Train Loss (lower is better)" in text
    for run in runs:
        values = run.values("valid", "Loss")
        best = min(values, key=values.__getitem__)
        assert (
            f"| {run.name:<7} | {format_cell(values[best])} | {best:<5} | {values[3]:.3f}" in text
        )
    assert "Configuration keys that differ:" in text
    assert re.search(r"\n  hparams\.lr +lr-0\.1=0\.1, lr-0\.05=0\.05, lr-0\.01=0\.01\n", text)
    assert "optimizer.param_groups.0.lr" in text and "directory" not in text.split("differ:")[1]
    assert "lr-0.1: epoch 3 of 3, finished" in text


def test_compare_knows_which_way_is_better(tmp_path: Path) -> None:
    """A metric whose attributes say higher is better (recorded in config.json) has its best
    at its highest value."""
    train(
        tmp_path / "run",
        epochs=3,
        configure=lambda builder: builder.metric_train_numeric(IterationSpeedMetric()),
    )
    run = load(tmp_path / "run")
    assert run.config["directions"] == {"Iteration Speed": "highest", "Loss": "lowest"}
    text = compare([run])
    assert "Train Iteration Speed (iter/sec) (higher is better)" in text
    speeds = run.values("train", "Iteration Speed")
    best = max(speeds, key=speeds.__getitem__)
    assert f"| run | {format_cell(speeds[best])} | {best:<5} |" in text


def test_cli_plot_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ember plot A B C -o FILE` writes the overlay; without -o it refuses (exit 2);
    `ember compare A B C` prints the comparison."""
    pytest.importorskip("matplotlib")
    directories = [str(path) for path in three_runs(tmp_path)]
    output = tmp_path / "runs.png"
    assert main(["plot", *directories, "-o", str(output)]) == 0
    assert capsys.readouterr().out == f"wrote {output}\n"
    assert output.read_bytes().startswith(PNG_SIGNATURE)
    assert main(["plot", *directories]) == 2
    assert "give the image to write" in capsys.readouterr().err
    assert main(["compare", *directories]) == 0
    assert capsys.readouterr().out == compare(load([Path(d) for d in directories])) + "\n"
    assert main(["compare", str(tmp_path / "nothing")]) == 2
    assert "ember compare: no training run in" in capsys.readouterr().err


def test_a_complete_run_without_checkpointers_reads_as_finished(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38 item 4, the user's case: two epochs without checkpointers, complete. ember.runs
    and `ember compare` say finished (they said "epoch 2 of 2, not finished")."""
    torch.manual_seed(0)
    model = TinyRegressor()
    quiet(tmp_path / "run", loader(10), loader(6)).metrics(LossMetric()).num_epochs(2).launch(
        Learner(model, torch.optim.SGD(model.parameters(), lr=0.05))
    )
    run = load(tmp_path / "run")
    assert (run.last_epoch, run.finished, run.failed, run.stop_reason) == (2, True, False, None)
    assert main(["compare", str(tmp_path / "run")]) == 0
    assert "run: epoch 2 of 2, finished" in capsys.readouterr().out
