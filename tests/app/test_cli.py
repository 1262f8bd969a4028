"""The ``ember`` command's summary and plot subcommands, and the lazily loaded extras."""

from __future__ import annotations

import io
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import ember
from ember.app.cli import main
from ember.extend import MetricEntry, MetricState, NumericEntry
from ember.train import (
    CliMetricsRenderer,
    FileMetricLogger,
    Learner,
    LearnerSummary,
    LossMetric,
    Split,
    SupervisedTraining,
)
from ember.train._logger.store import EventStore
from tests.train.fixtures import TinyRegressor, loader

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LOSS = {Split.TRAIN: [2.0, 1.0, 0.5], Split.VALID: [2.5, 1.5, 1.75]}
LEARNING_RATE = [0.01, 0.005, 0.001]


def write_run(directory: Path) -> LearnerSummary:
    """Metric logs of a 3-epoch run, as training writes them; returns its summary."""
    store = EventStore([FileMetricLogger(directory)])
    for epoch in (1, 2, 3):
        for split in (Split.TRAIN, Split.VALID):
            store.start_split(split, epoch)
            final = LOSS[split][epoch - 1]
            batches = [("Loss", NumericEntry(final + 0.25, 1)), ("Loss", NumericEntry(final, 1))]
            finals = [("Loss", NumericEntry(final, final=True))]
            if split is Split.TRAIN:
                rate = LEARNING_RATE[epoch - 1]
                batches.append(("Learning Rate", NumericEntry(rate, 1)))
                finals.append(("Learning Rate", NumericEntry(rate, final=True)))
            for name, value in [*batches, *finals]:
                store.log(split, [MetricState(MetricEntry(name, "", value.serialize()))], epoch)
            store.log(split, [MetricState(MetricEntry("Notes", "", "a text metric"))], epoch)
            store.end_split(split)
    summary = LearnerSummary.collect(store, ["Loss", "Learning Rate"], 3)
    store.close()
    return summary


def test_summary_from_summary_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With summary.json, `ember summary` prints it, model and stop reason included."""
    summary = write_run(tmp_path)
    saved = LearnerSummary(summary.epochs, summary.metrics, "Mlp()", "early stop")
    (tmp_path / "summary.json").write_text(saved.dumps(), encoding="utf-8")
    assert main(["summary", str(tmp_path)]) == 0
    assert capsys.readouterr().out == f"{saved}\n"


def test_summary_from_logs_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Without summary.json the table is rebuilt from the logs: numeric metrics only, `_` in
    file names read as spaces, the same rows training printed."""
    summary = write_run(tmp_path)
    assert (tmp_path / "train" / "epoch-1" / "Learning_Rate.log").exists()
    assert main(["summary", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out == f"{summary}\n"
    assert "| Train | Learning Rate | 1.000e-3 | 3        | 0.010    | 1        |" in out
    assert "| Valid | Loss          | 1.500    | 2        | 2.500    | 1        |" in out
    assert "Notes" not in out


@pytest.mark.parametrize("make", ["missing", "empty", "foreign"])
def test_summary_without_a_run_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str
) -> None:
    """No run in DIR: exit code 2 and a message naming DIR."""
    directory = tmp_path / "run"
    if make != "missing":
        directory.mkdir()
    if make == "foreign":
        (directory / "notes.txt").write_text("not a run")
        (directory / "train").mkdir()
    assert main(["summary", str(directory)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"ember summary: no training run in {str(directory)!r}" in captured.err


def test_summary_with_a_broken_summary_json_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A summary.json that cannot be read is reported, not a traceback."""
    (tmp_path / "summary.json").write_text("{not json", encoding="utf-8")
    assert main(["summary", str(tmp_path)]) == 2
    assert "summary.json cannot be read: it is not valid JSON" in capsys.readouterr().err


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`ember plot DIR` writes DIR/metrics.png, a PNG that matplotlib reads back."""
    pytest.importorskip("matplotlib")
    from matplotlib.image import imread

    write_run(tmp_path)
    assert main(["plot", str(tmp_path)]) == 0
    path = tmp_path / "metrics.png"
    assert capsys.readouterr().out == f"wrote {path}\n"
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    image = imread(path)
    assert image.shape[0] > 0 and image.shape[1] > image.shape[0]  # two subplots side by side
    assert not list(tmp_path.glob("*.tmp"))


def test_plot_to_a_chosen_file(tmp_path: Path) -> None:
    """-o FILE writes there, creating its directory."""
    pytest.importorskip("matplotlib")
    write_run(tmp_path / "run")
    output = tmp_path / "out" / "curves.png"
    assert main(["plot", str(tmp_path / "run"), "-o", str(output)]) == 0
    assert output.read_bytes().startswith(PNG_SIGNATURE)
    assert not (tmp_path / "run" / "metrics.png").exists()


def test_plot_of_an_empty_directory_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No metric logs: exit code 2, a message naming the directory, no image."""
    assert main(["plot", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert f"ember plot: no training run in {str(tmp_path)!r}" in captured.err
    assert not (tmp_path / "metrics.png").exists()


def test_missing_extras_say_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without matplotlib, scikit-learn or tensorboard the error names the extra."""
    from ember.app.digits import load_digits
    from ember.train import TensorBoardLogger

    write_run(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    assert main(["plot", str(tmp_path)]) == 2
    assert "pip install ember[plot]" in capsys.readouterr().err
    with pytest.raises(ImportError, match=r"pip install ember\[examples\]"):
        load_digits()
    with pytest.raises(ImportError, match=r"pip install ember\[tensorboard\]"):
        TensorBoardLogger(tmp_path / "tb")
    assert main(["digits", "--dir", str(tmp_path / "digits")]) == 2
    assert "pip install ember[examples]" in capsys.readouterr().err
    assert not (tmp_path / "digits").exists()


def test_optional_dependencies_load_lazily() -> None:
    """Importing ember, its CLI, ember.runs, digits and loggers imports no optional dependency."""
    code = (
        "import sys, ember, ember.app.cli, ember.runs, ember.app.digits\n"
        "import ember.train._tracking, ember.train._logger.mlflow\n"
        "import ember.train._logger.wandb, ember.train._logger.optuna\n"
        "heavy = {'tensorboard', 'matplotlib', 'sklearn', 'torchmetrics', 'mlflow', 'wandb',\n"
        "         'optuna', 'pandas'}\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "                or m.startswith('torch.utils.tensorboard'))\n"
        "print(loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """`ember --help` names every subcommand."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "summary", "plot", "digits", "eval", "export"):
        assert command in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    """``ember --version`` prints the version and exits 0."""
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"ember {ember.__version__}"


@pytest.mark.parametrize("command", [[], ["demo"], ["summary"], ["plot"], ["eval"], ["export"]])
def test_help_is_plain_text(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 12, item 8: --help reads in a terminal, without reStructuredText markup (the
    module doc's ``ember demo`` became "ember demo")."""
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "``" not in out
    assert re.search(r":[a-z]+:`", out) is None
    if not command:
        assert "The ember command. ember demo runs the seed's experiment;" in " ".join(out.split())


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-epoch run with its default checkpoints, for `ember export`."""
    directory = tmp_path_factory.mktemp("export") / "run"
    model = TinyRegressor()
    result = (
        SupervisedTraining(directory, loader(8), loader(4))
        .metrics(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_default_checkpointers()
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1))
    )
    assert result.error is None, result.traceback
    return directory


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` and its bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_export_refuses_a_fifo_a_device_and_a_link_and_leaves_them(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 1: `-o` naming a FIFO, a device node (what `-o /dev/null` is) or a link to
    /dev/null exits 2 naming it, and each is still what it was (the atomic rename used to
    replace it with a regular file)."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "null-link"
    link.symlink_to("/dev/null")
    targets = [(fifo, stat.S_ISFIFO, "a FIFO"), (link, stat.S_ISLNK, "a symbolic link")]
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # as /dev/null
        targets.append((device, stat.S_ISCHR, "a character device"))
    except PermissionError:  # mknod needs root: the FIFO and the link still stand for it
        pass
    for target, kind, words in targets:
        assert main(["export", str(trained_run), "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"output {str(target)!r} exists and is {words}, not a regular file" in err
        assert kind(os.lstat(target).st_mode)
    assert os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(t.name for t, _, _ in targets)


def test_export_never_writes_into_a_checkpoint_directory(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 1: `-o RUN/checkpoint/model-2.safetensors` (the run's own checkpoint) and
    a new file beside it are refused; every checkpoint file is byte for byte as it was."""
    checkpoint = trained_run / "checkpoint"
    before = snapshot(checkpoint)
    for target in (checkpoint / "model-2.safetensors", checkpoint / "new.safetensors"):
        assert main(["export", str(trained_run), "--epoch", "1", "-o", str(target)]) == 2
        err = capsys.readouterr().err
        assert f"is inside the checkpoint directory {checkpoint.resolve()} of a run" in err
    assert snapshot(checkpoint) == before


def test_export_needs_the_output_directory_and_keeps_the_checkpoint_mode(
    trained_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 1: a missing directory is an error (not created silently); the exported
    file has the mode of the checkpoint file it comes from, and replaces a regular file."""
    missing = tmp_path / "typo" / "model.safetensors"
    assert main(["export", str(trained_run), "-o", str(missing)]) == 2
    assert f"the directory of output {str(missing)!r} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()
    output = tmp_path / "model.safetensors"
    output.write_bytes(b"an older export")
    output.chmod(0o644)
    assert main(["export", str(trained_run), "--epoch", "2", "-o", str(output)]) == 0
    source = trained_run / "checkpoint" / "model-2.safetensors"
    assert stat.S_IMODE(output.stat().st_mode) == stat.S_IMODE(source.stat().st_mode)
    assert load_file(output).keys() == TinyRegressor().state_dict().keys()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--epochs", "x"], "argument --epochs: must be an integer >= 1, got 'x'"),
        (["demo", "--epochs", "0"], "argument --epochs: must be >= 1, got 0"),
        (["demo", "--workers", "two"], "argument --workers: must be an integer >= 0, got 'two'"),
        (["digits", "--epochs", "1.5"], "argument --epochs: must be an integer >= 1, got '1.5'"),
        (["export", "DIR", "--epoch", "x", "-o", "f"], "must be best, last or an epoch number"),
    ],
)
def test_a_bad_number_is_named_without_private_names(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 10: `--epochs x` printed "invalid _positive value: 'x'", naming a private
    function of the CLI; the message says what the option takes."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert re.search(r"invalid _\w+ value|\b_\w+\(", err) is None


@pytest.mark.parametrize(
    "command", [["summary", "RUN"], ["compare", "RUN", "RUN"], ["--help"]], ids=str
)
def test_a_reader_that_goes_away_ends_the_command_quietly(
    command: list[str], tmp_path: Path
) -> None:
    """`ember summary DIR | head`, the reader gone before ember writes: no BrokenPipeError
    traceback, nothing on stderr, exit 141 as a Unix tool under SIGPIPE (argparse's --help
    ignores a write that fails: 0)."""
    write_run(tmp_path / "run")
    args = [str(tmp_path / "run") if arg == "RUN" else arg for arg in command]
    read, write = os.pipe()
    os.close(read)  # the reader is gone: every write to the pipe fails
    try:
        done = subprocess.run(
            [sys.executable, "-m", "ember", *args],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert done.stderr == ""
    assert done.returncode == (0 if command == ["--help"] else 141)
