"""A run of several validation sets read back (issue 40): ember.runs, ``ember summary``, ``ember
compare`` and ``ember plot`` show each set's values under its own name, ``Loss (noisy)``."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch

from ember._table import format_cell
from ember.app.cli import main
from ember.runs import compare, load
from ember.train import CliMetricsRenderer, Learner, LearnerSummary, LossMetric, SupervisedTraining
from tests.train.fixtures import TinyRegressor, loader
from tests.train.test_valid_sets import noisy


def train(directory: Path, lr: float = 0.05) -> None:
    """Three epochs validated on a clean set (the main one) and a noisy one."""
    torch.manual_seed(0)
    model = TinyRegressor()
    sets = {"clean": loader(10, seed=1), "noisy": noisy()}
    result = (
        SupervisedTraining(directory, loader(16, shuffle=3), sets)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(3)
        .summary()
        .hparams({"lr": lr})
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=lr)))
    )
    assert result.error is None, result.traceback


def test_a_run_of_two_sets_reads_back_with_both(tmp_path: Path) -> None:
    """Run.metrics, values and rows hold "Loss (noisy)" beside "Loss", read back exactly
    (the steps file names it, underscores and all); the summary rebuilt from the logs equals
    the one the run wrote; to_pandas has both series."""
    train(tmp_path / "run")
    run = load(tmp_path / "run")
    assert run.metrics("valid") == ["Loss", "Loss (noisy)"]
    assert run.metrics("train") == ["Loss"]
    noisy_values = run.values("valid", "Loss (noisy)")
    assert sorted(noisy_values) == [1, 2, 3] and noisy_values != run.values("valid", "Loss")
    assert run.summary is not None and run.summary_from_logs() == LearnerSummary(
        3, run.summary.metrics
    )
    assert ("Valid", "Loss (noisy)") in [(row.split, row.name) for row in run.summary.metrics]
    pytest.importorskip("pandas")
    frame = run.to_pandas()
    valid = frame[frame.split == "valid"]
    noisy_frame = valid[valid.metric == "Loss (noisy)"].set_index("epoch")["value"].to_dict()
    assert noisy_frame == noisy_values


def test_compare_and_plot_show_each_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ember compare has a "Valid Loss (noisy)" table with each run's best and last values;
    ember plot draws a "Loss (noisy)" panel with the set's values; ember summary prints its
    row."""
    train(tmp_path / "a")
    train(tmp_path / "b", lr=0.01)
    runs = load([tmp_path / "a", tmp_path / "b"])
    text = compare(runs)
    assert "Valid Loss (noisy) (lower is better)" in text
    for run in runs:
        values = run.values("valid", "Loss (noisy)")
        best = min(values, key=values.__getitem__)
        row = f"| {run.name:<3} | {format_cell(values[best])} | {best:<5} | "
        assert row + f"{format_cell(values[3])} | 3     |" in text
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out == text + "\n"
    assert main(["summary", str(tmp_path / "a")]) == 0
    assert "| Valid | Loss (noisy) |" in capsys.readouterr().out
    pytest.importorskip("matplotlib")
    import ember._rundir.curves as drawing
    from ember.runs._plot import _curves

    one = runs[0]
    figure = drawing._draw([_curves(one)], ["Loss", "Loss (noisy)"])
    panels = {ax.get_title(): ax for ax in figure.axes if ax.get_visible()}
    assert sorted(panels) == ["Loss", "Loss (noisy)"]
    (line,) = panels["Loss (noisy)"].get_lines()
    assert list(line.get_ydata()) == list(one.values("valid", "Loss (noisy)").values())
    assert main(["plot", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "metrics.png").read_bytes().startswith(b"\x89PNG")


def test_a_set_name_with_underscores_and_dots_reads_back_as_written(tmp_path: Path) -> None:
    """The set "noisy_v1.2" logs to Loss_(noisy_v1.2).log; ember.runs reads the name back from
    the steps file exactly (not "noisy v1.2"), and the run's values under it."""
    torch.manual_seed(0)
    model = TinyRegressor()
    sets = {"clean": loader(10, seed=1), "noisy_v1.2": noisy()}
    result = (
        SupervisedTraining(tmp_path, loader(16), sets)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    )
    assert (tmp_path / "valid" / "epoch-1" / "Loss_(noisy_v1.2).log").is_file()
    run = load(tmp_path)
    assert run.metrics("valid") == ["Loss", "Loss (noisy_v1.2)"]
    assert run.values("valid", "Loss (noisy_v1.2)") == result.values("valid", "Loss (noisy_v1.2)")
