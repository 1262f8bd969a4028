"""``ember.cli``: a typed function's command line and YAML files, its refusals, and what the runs
it launches record (``config.json``'s ``cli``, ``config.yaml``, the trackers' params)."""

from __future__ import annotations

import enum
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.train import CliMetricsRenderer, Learner, LearningResult, LossMetric, SupervisedTraining
from tests.train.fixtures import TinyRegressor, loader

pytest.importorskip("jsonargparse", reason="ember.cli needs jsonargparse: pip install ember[cli]")
yaml = pytest.importorskip("yaml")  # jsonargparse's dependency


class Kind(enum.Enum):
    """Which optimizer."""

    SGD = "sgd"
    ADAM = "adam"


@dataclass(frozen=True)
class Schedule:
    """The learning-rate schedule."""

    warmup: int = 0
    """Steps of linear warm-up."""


@dataclass(frozen=True)
class Optim:
    """The optimizer."""

    lr: float = 0.05
    """The learning rate of every step."""
    kind: Kind = Kind.SGD
    schedule: Schedule = field(default_factory=Schedule)


@dataclass(frozen=True)
class Data:
    """The loaders."""

    batch_size: int = 4
    """Items per batch."""
    shuffle: int | None = None
    """The shuffle seed; null: in order."""


@dataclass(frozen=True)
class Seen:
    """What ``experiment`` was called with."""

    epochs: int
    optim: Optim
    data: Data
    precision: str
    tag: str | None
    notes: Path | None


def experiment(
    epochs: int,
    optim: Optim = Optim(),
    data: Data = Data(),
    precision: Literal["32", "bf16-mixed"] = "32",
    tag: str | None = None,
    notes: Path | None = None,
) -> Seen:
    """Try the options.

    Args:
        epochs: How many epochs to train.
        precision: The autocast precision.
        tag: A name for the run.
        notes: A file of notes.
    """
    return Seen(epochs, optim, data, precision, tag, notes)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_help_lists_every_option_with_its_type_default_and_words(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--help names each option, nested ones dotted, with its type, default and the words of
    the function's or the dataclass's docstring; it runs nothing (exit 0)."""
    with pytest.raises(SystemExit) as exited:
        ember.cli(experiment, args=["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps the lines
    assert "Try the options." in text
    assert "--epochs EPOCHS How many epochs to train. (required, type: int)" in text
    assert "--optim.lr LR The learning rate of every step. (type: float, default: 0.05)" in text
    assert "--optim.kind {SGD,ADAM}" in text and "default: SGD" in text
    assert "--optim.schedule.warmup WARMUP Steps of linear warm-up. (type: int, default: 0)" in text
    assert "--data.batch_size BATCH_SIZE Items per batch. (type: int, default: 4)" in text
    assert "--precision {32,bf16-mixed} The autocast precision." in text
    assert "--tag TAG A name for the run. (type: str | null, default: null)" in text
    assert "--config CONFIG a YAML file of options" in text and "--print_config" in text


def test_files_layer_in_order_and_the_command_line_overrides_them(tmp_path: Path) -> None:
    """Defaults, then each --config file in turn, then the other options, wherever --config
    stands: the values arrive typed (dataclasses, the Enum member, a Path)."""
    first = write(tmp_path / "a.yaml", "epochs: 2\noptim:\n  lr: 0.5\n  kind: ADAM\ntag: a\n")
    second = write(tmp_path / "b.yaml", "optim:\n  lr: 0.25\ndata:\n  shuffle: 7\n")
    seen = ember.cli(
        experiment,
        args=[
            *("--data.batch_size", "16", "--config", str(first), "--tag", "cli"),
            *(f"--config={second}", "--notes", "notes.md", "--optim.schedule.warmup", "10"),
        ],
    )
    assert seen == Seen(
        epochs=2,
        optim=Optim(lr=0.25, kind=Kind.ADAM, schedule=Schedule(warmup=10)),
        data=Data(batch_size=16, shuffle=7),
        precision="32",
        tag="cli",
        notes=Path("notes.md"),
    )
    assert isinstance(seen.notes, Path) and isinstance(seen.optim, Optim)


def test_print_config_prints_the_resolved_yaml_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--print_config prints the values resolved from the file and the options as YAML a
    --config reads back, and exits 0 without calling the function."""
    file = write(tmp_path / "exp.yaml", "epochs: 3\ndata:\n  batch_size: 8\n")
    with pytest.raises(SystemExit) as exited:
        ember.cli(experiment, args=["--config", str(file), "--optim.lr", "0.1", "--print_config"])
    assert exited.value.code == 0
    printed = capsys.readouterr().out
    assert yaml.safe_load(printed) == {
        "epochs": 3,
        "optim": {"lr": 0.1, "kind": "SGD", "schedule": {"warmup": 0}},
        "data": {"batch_size": 8, "shuffle": None},
        "precision": "32",
        "tag": None,
        "notes": None,
    }
    again = ember.cli(experiment, args=["--config", str(write(tmp_path / "p.yaml", printed))])
    assert again.optim.lr == 0.1 and again.data.batch_size == 8 and again.epochs == 3


REFUSALS = {
    "a misspelled option": (
        ["--epochs", "1", "--optim.lrr", "0.1"],
        None,
        ["--optim.lrr 0.1", "did you mean --optim.lr?"],
    ),
    "an option at the wrong depth": (
        ["--epochs", "1", "--lr", "0.1"],
        None,
        ["--lr 0.1", "did you mean --optim.lr?"],
    ),
    "a misspelled key in a file": (
        [],
        "epochs: 1\ndata:\n  bach_size: 8\n",
        ["'bach_size'", "in a --config file", "did you mean --data.batch_size?"],
    ),
    "a wrong type": (
        ["--epochs", "1", "--data.batch_size", "eight"],
        None,
        ['"data.batch_size"', "Expected a <class 'int'>", "Got value: eight"],
    ),
    "a wrong choice": (
        ["--epochs", "1", "--precision", "16"],
        None,
        ['"precision"', "Literal['32', 'bf16-mixed']", "Got value: 16"],
    ),
    "a wrong type in a file": (
        [],
        "epochs: many\n",
        ['"epochs"', "Expected a <class 'int'>", "Got value: many"],
    ),
    "a missing required value": (
        ["--tag", "x"],
        None,
        ["required: epochs", "give --epochs VALUE or 'epochs:' in a --config file (type: int)"],
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_wrong_key_type_or_missing_value_is_refused_before_anything_runs(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The user's mistakes: exit 2 as argparse, the message naming the key, the value and what
    was expected; the function is never called."""
    args, file, expected = REFUSALS[case]
    if file is not None:
        args = [*args, "--config", str(write(tmp_path / "exp.yaml", file))]
    called: list[object] = []

    def main(epochs: int, optim: Optim = Optim(), data: Data = Data(), tag: str = "") -> None:
        called.append(epochs)

    def typed(epochs: int, precision: Literal["32", "bf16-mixed"] = "32") -> None:
        called.append(epochs)

    with pytest.raises(SystemExit) as exited:
        ember.cli(typed if case == "a wrong choice" else main, args=args)
    assert exited.value.code == 2
    message = capsys.readouterr().err
    for part in expected:
        assert part in message, message
    assert called == []


def test_a_function_the_command_line_cannot_call_is_refused() -> None:
    """A parameter without a type, *args or **kwargs: a TypeError that says what to write."""

    def untyped(lr=0.1) -> None:  # type: ignore[no-untyped-def]
        pass

    def variadic(*args: int) -> None:
        pass

    with pytest.raises(TypeError, match=r"'lr' has no type annotation.*annotate it"):
        ember.cli(untyped, args=[])
    with pytest.raises(TypeError, match=r"\*args.*make it a named parameter"):
        ember.cli(variadic, args=[])
    with pytest.raises(TypeError, match=r"args must be a list of strings.*'--lr'"):
        ember.cli(experiment, args="--epochs 1")


@settings(max_examples=20, deadline=None)
@given(
    epochs=st.integers(1, 10**6),
    lr=st.floats(1e-6, 10.0, allow_nan=False),
    shuffle=st.none() | st.integers(0, 2**31),
    tag=st.none()
    | st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=12).filter(
        lambda text: text.lower() not in ("null", "none")  # YAML's and jsonargparse's None
    ),
)
def test_values_round_trip_through_options_and_the_recorded_yaml(
    epochs: int, lr: float, shuffle: int | None, tag: str | None
) -> None:
    """Whatever the values, given as options they arrive as given, and the YAML a run records
    gives the same values back."""
    args = ["--epochs", str(epochs), "--optim.lr", repr(lr)]
    args += [] if shuffle is None else ["--data.shuffle", str(shuffle)]
    args += [] if tag is None else ["--tag", tag]
    seen = ember.cli(experiment, args=args)
    assert (seen.epochs, seen.optim.lr, seen.data.shuffle, seen.tag) == (epochs, lr, shuffle, tag)
    from ember.train._experiment import current_experiment

    recorded: list[str] = []

    def record(epochs: int, optim: Optim = Optim(), data: Data = Data(), tag: str | None = None):  # type: ignore[no-untyped-def]
        experiment = current_experiment()
        assert experiment is not None
        recorded.append(experiment.yaml)
        assert experiment.values["optim"]["lr"] == lr and experiment.values["tag"] == tag

    ember.cli(record, args=args)
    assert yaml.safe_load(recorded[0])["optim"]["lr"] == lr


# --- what the runs record ---------------------------------------------------------------------


@dataclass(frozen=True)
class Loaders:
    """The tiny regression data."""

    items: int = 8
    batch_size: int = 4
    """Items per batch."""


def train(
    directory: Path,
    epochs: int = 1,
    lr: float = 0.05,
    data: Loaders = Loaders(),
    tracking: Path | None = None,
    tensorboard: Path | None = None,
) -> LearningResult[TinyRegressor]:
    """Train the tiny regressor.

    Args:
        directory: The run directory.
        tracking: An MLflow sqlite store to log to too.
        tensorboard: A TensorBoard log directory to log to too.
    """
    torch.manual_seed(0)
    model = TinyRegressor()
    training = (
        SupervisedTraining(directory, loader(data.items, data.batch_size), loader(4, seed=1))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .renderer(CliMetricsRenderer(io.StringIO()))
    )
    if tracking is not None:
        from ember.train import MLflowLogger

        logger = MLflowLogger(tracking_uri=f"sqlite:///{tracking.resolve()}", experiment="cli")
        training = training.with_metric_logger(logger)
    if tensorboard is not None:
        from ember.train import TensorBoardLogger

        training = training.with_metric_logger(TensorBoardLogger(tensorboard))
    return training.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=lr), lr))


def test_the_resolved_configuration_lands_in_config_json_and_config_yaml(tmp_path: Path) -> None:
    """config.json's "cli" is the resolved values as plain JSON, keys as the function spells
    them; config.yaml beside it runs the experiment again with the same values."""
    run = tmp_path / "run"
    options = write(tmp_path / "exp.yaml", f"directory: {run}\nepochs: 2\ndata:\n  items: 12\n")
    result = ember.cli(train, args=["--config", str(options), "--lr", "0.1"])
    assert result.succeeded and result.last_epoch == 2
    with (run / "config.json").open(encoding="utf-8") as handle:
        config = json.load(handle)
    expected = {
        "directory": str(run),
        "epochs": 2,
        "lr": 0.1,
        "data": {"items": 12, "batch_size": 4},
        "tracking": None,
        "tensorboard": None,
    }
    assert config["cli"] == expected
    assert config["num_epochs"] == 2 and config["train"]["items"] == 12  # what the run did

    again = tmp_path / "again"
    rerun = ember.cli(train, args=["--config", str(run / "config.yaml"), "--directory", str(again)])
    assert rerun.succeeded
    recorded = json.loads((again / "config.json").read_text(encoding="utf-8"))["cli"]
    assert recorded == {**expected, "directory": str(again)}
    assert all(  # the same run again
        torch.equal(mine, theirs)
        for mine, theirs in zip(rerun.model.parameters(), result.model.parameters(), strict=True)
    )


def test_a_run_launched_without_ember_cli_records_none(tmp_path: Path) -> None:
    """Outside ember.cli (and after it returned), config.json's "cli" is null, no config.yaml."""
    ember.cli(train, args=["--directory", str(tmp_path / "first")])
    train(tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "config.json").read_text())["cli"] is None
    assert not (tmp_path / "plain" / "config.yaml").exists()


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")
def test_the_trackers_get_the_configuration_as_params(tmp_path: Path) -> None:
    """MLflow's params hold the resolved values under cli., dotted as the options are;
    TensorBoard's config text is config.json, cli included."""
    mlflow = pytest.importorskip("mlflow")
    events = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    store, board = tmp_path / "mlflow.db", tmp_path / "board"
    args = ["--directory", str(tmp_path / "run"), "--data.batch_size", "2", "--tracking"]
    ember.cli(train, args=[*args, str(store), "--tensorboard", str(board)])
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{store.resolve()}")
    (run,) = client.search_runs([client.get_experiment_by_name("cli").experiment_id])
    params = run.data.params
    assert params["cli.data.batch_size"] == "2" and params["cli.lr"] == "0.05"
    assert params["cli.directory"] == str(tmp_path / "run")
    accumulator = events.EventAccumulator(str(board))
    accumulator.Reload()
    (text,) = accumulator.Tensors("config/text_summary")
    config = json.loads(text.tensor_proto.string_val[0].decode("utf-8"))
    assert config["cli"]["data"] == {"items": 8, "batch_size": 2}
