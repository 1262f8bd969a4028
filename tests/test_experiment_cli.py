"""``ember.cli``: a typed function's command line and YAML files, its refusals, and what the runs
it launches record (``config.json``'s ``cli``, ``config.yaml``, the trackers' params)."""

from __future__ import annotations

import dataclasses
import enum
import io
import json
import random
import sys
import types
import typing
import uuid
from collections import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import (
    Annotated,
    Any,
    Literal,
    NamedTuple,
    Optional,
    Protocol,
    TypedDict,
    TypeVar,
    Union,
)

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember.train import CliMetricsRenderer, Learner, LearningResult, LossMetric, SupervisedTraining
from tests.train.fixtures import TinyRegressor, loader

pytest.importorskip("jsonargparse", reason="ember.cli needs jsonargparse: pip install ember[cli]")
yaml = pytest.importorskip("yaml")  # jsonargparse's dependency

T = TypeVar("T")


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


# --- a config is data: no value imports or calls anything ----------------------------------


@dataclass(frozen=True)
class Sentinel:
    """A module in a temporary directory on ``sys.path`` whose import writes ``marker``: a
    value naming ``{module}.Thing`` must leave it unimported."""

    module: str
    marker: Path

    @property
    def spec(self) -> dict[str, object]:
        return {"class_path": f"{self.module}.Thing", "init_args": {"size": 1}}

    def untouched(self) -> bool:
        return self.module not in sys.modules and not self.marker.exists()


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sentinel]:
    directory = tmp_path_factory.mktemp("sentinel")
    found = Sentinel(f"ember_cli_sentinel_{uuid.uuid4().hex}", directory / "IMPORTED")
    source = f"open({str(found.marker)!r}, 'w').close()\n\n\nclass Thing:\n    size = 0\n"
    (directory / f"{found.module}.py").write_text(source, encoding="utf-8")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(directory))
        yield found


def taking(annotation: object, seen: list[object], default: object = None) -> Callable[..., None]:
    """A ``main(x=default)`` with ``x`` annotated ``annotation``, recording what it is given."""

    def main(x=default) -> None:  # type: ignore[no-untyped-def]  # annotated below
        seen.append(x)

    main.__annotations__["x"] = annotation
    return main


def given_in_a_file(directory: Path, value: object) -> list[str]:
    return ["--config", str(write(directory / "attack.yaml", yaml.safe_dump({"x": value})))]


Shape = tuple[object, Callable[[object], object]]


def nested(inner: st.SearchStrategy[Shape]) -> st.SearchStrategy[Shape]:
    def listed(shape: Shape) -> Shape:
        part, place = shape
        return list[part], lambda value: [place(value)]  # type: ignore[valid-type]

    def mapped(shape: Shape) -> Shape:
        part, place = shape
        return dict[str, part], lambda value: {"k": place(value)}  # type: ignore[valid-type]

    def optional(shape: Shape) -> Shape:
        part, place = shape
        return Optional[part], place  # noqa: UP045  # Any | None fails

    return st.one_of(inner.map(listed), inner.map(mapped), inner.map(optional))


# an annotation that takes Any or object somewhere, and where a value goes in it:
# (list[dict[str, Any]], lambda value: [{"k": value}])
DATA_SHAPES = st.recursive(
    st.sampled_from([Any, object]).map(lambda leaf: (leaf, lambda value: value)),
    nested,
    max_leaves=4,
)


@settings(max_examples=25, deadline=None)
@given(shape=DATA_SHAPES, on_the_command_line=st.booleans())
def test_a_class_path_where_any_stands_is_data_and_imports_nothing(
    shape: Shape,
    on_the_command_line: bool,
    sentinel: Sentinel,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The attack: {class_path: a module's class, init_args: ...} wherever Any or object stands
    in an annotation (in lists, dicts, unions), in a --config file or on the command line: main
    gets the mapping as written, and the module it names is never imported."""
    annotation, place = shape
    value = place(sentinel.spec)
    directory = tmp_path_factory.mktemp("config")
    seen: list[object] = []
    args = ["--x", json.dumps(value)] if on_the_command_line else given_in_a_file(directory, value)
    ember.cli(taking(annotation, seen), args=args)
    assert seen == [value]
    assert sentinel.untouched()


@pytest.mark.parametrize(
    "annotation",
    [Any, Optional[Any], object, list[Any], dict[str, Any], dict, list],  # noqa: UP045
    ids=str,
)
def test_the_audits_os_system_config_runs_no_command(annotation: object, tmp_path: Path) -> None:
    """The audit's file, {class_path: os.system, init_args: {command: touch FILE}}, for a
    parameter annotated Any, Optional[Any], object, list[Any], dict[str, Any]: no command runs,
    main gets the mapping."""
    pwned = tmp_path / "pwned"
    attack = {"class_path": "os.system", "init_args": {"command": f"touch {pwned}"}}
    kind = typing.get_origin(annotation) or annotation
    value = [attack] if kind is list else {"kwargs": attack} if kind is dict else attack
    seen: list[object] = []
    ember.cli(taking(annotation, seen), args=given_in_a_file(tmp_path, value))
    assert seen == [value]
    assert not pwned.exists()


@dataclass(frozen=True)
class Holder:
    """A plain dataclass whose fields take any data."""

    x: Any = None
    many: list[Any] = field(default_factory=list)


class Options(TypedDict, total=False):
    """A TypedDict whose value takes any data."""

    x: Any


def bare(spec: dict[str, object]) -> dict[str, object]:
    """``spec`` without its ``init_args``."""
    return {"class_path": spec["class_path"]}


@pytest.mark.parametrize(
    ("annotation", "default", "built"),
    [
        (Holder, Holder(), lambda spec: Holder(spec, [spec])),
        (Options, None, lambda spec: {"x": spec}),
        (Optional[Holder], None, lambda spec: Holder(bare(spec), [bare(spec)])),  # noqa: UP045
        (list[Holder], [], lambda spec: [Holder(bare(spec), [])]),
    ],
    ids=["dataclass", "TypedDict", "optional dataclass", "list of dataclasses"],
)
def test_a_class_path_in_a_field_of_any_is_data(
    annotation: object,
    default: object,
    built: Callable[[dict[str, object]], object],
    sentinel: Sentinel,
    tmp_path: Path,
) -> None:
    """Any in a plain dataclass's field or a TypedDict's, the class given or nested in an
    Optional or a list, takes the mapping as written too."""
    expected = built(sentinel.spec)
    value: object = expected
    if isinstance(expected, list):
        value = [dataclasses.asdict(item) for item in expected]
    elif isinstance(expected, Holder):
        value = dataclasses.asdict(expected)
    seen: list[object] = []
    ember.cli(taking(annotation, seen, default), args=given_in_a_file(tmp_path, value))
    assert seen == [expected]
    assert sentinel.untouched()


@pytest.mark.parametrize(
    ("annotation", "place"),
    [
        (Optional[Holder], lambda spec: spec),  # noqa: UP045
        (list[Holder], lambda spec: [spec]),
        (dict[str, Holder], lambda spec: {"k": spec}),
        (Optional[Holder], lambda spec: {"x": spec}),  # noqa: UP045
        (list[Holder], lambda spec: [{"x": spec}]),
    ],
    ids=["optional", "list", "dict", "Any in an optional", "Any in a list"],
)
def test_a_class_path_jsonargparse_would_import_is_refused_unimported(
    annotation: object,
    place: Callable[[object], object],
    sentinel: Sentinel,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The second wall: where jsonargparse still resolves a class_path (a dataclass inside an
    Optional, a list or a dict, which it builds from its own class_path, and their Any fields
    when the mapping has init_args), one naming another module is refused (exit 2), never
    imported."""
    with pytest.raises(SystemExit) as exited:
        ember.cli(taking(annotation, []), args=given_in_a_file(tmp_path, place(sentinel.spec)))
    assert exited.value.code == 2
    assert sentinel.module in capsys.readouterr().err
    assert sentinel.untouched()


def test_jsonargparse_settings_are_the_processs_again_after_ember_cli() -> None:
    """The import-path policy ember.cli sets while it parses is restored after, for whatever
    else the process parses with jsonargparse."""
    from jsonargparse import _common

    before = dict(_common.parsing_settings)
    ember.cli(taking(dict[str, Any], []), args=["--x", '{"a": 1}'])
    assert _common.parsing_settings == before


class Plain:
    """A class that is not a dataclass: jsonargparse builds it, or any subclass a config names."""

    def __init__(self, size: int = 1) -> None:
        self.size = size


class Readable(Protocol):
    def read(self) -> str: ...


@dataclass(frozen=True)
class OnAPlainBase(Plain):
    """A dataclass with a base that is not one: jsonargparse takes a class_path for it."""

    rate: float = 0.1


@dataclass(frozen=True)
class Hooks:
    """A dataclass with a field of code."""

    every: int = 1
    call: Callable[[int], None] | None = None


class Calls(TypedDict):
    """A TypedDict with a value of code."""

    call: Callable[[], None]


class Pair(NamedTuple):
    first: int
    second: Any


CODE = {
    "Callable": (abc.Callable, "a callable"),
    "Callable[[int], int]": (abc.Callable[[int], int], "a callable"),
    "typing.Callable": (typing.Callable, "a callable"),
    "type": (type, "a class"),
    "type[int]": (type[int], "a class"),
    "typing.Type[Plain]": (typing.Type[Plain], "a class"),  # noqa: UP006
    "module": (types.ModuleType, "a module"),
    "a class": (Plain, "not a plain dataclass"),
    "a Protocol": (Readable, "not a plain dataclass"),
    "a dataclass on a class": (OnAPlainBase, "not a plain dataclass"),
    "a NamedTuple": (Pair, "not a plain dataclass"),
    "a TypeVar": (T, "not a type ember.cli reads as data"),
}
DATA = [int, float, str, bool, Path, type(None), Literal["a", 1], Kind, Any, object, Optim, Options]


@pytest.mark.parametrize("case", sorted(CODE))
def test_an_annotation_that_needs_an_import_is_refused_at_set_up(case: str) -> None:
    """A parameter whose values jsonargparse would import (a callable, a type, a class to build,
    a module): a TypeError before anything is parsed, naming the parameter, the part and what to
    write instead; main never runs."""
    annotation, why = CODE[case]
    seen: list[object] = []
    with pytest.raises(TypeError) as refused:
        ember.cli(taking(Optional[annotation], seen), args=[])  # noqa: UP045
    message = str(refused.value)
    assert "main's parameter 'x'" in message and why in message
    assert "a dataclass" in message and "dict[str, int | float | str]" in message
    assert seen == []


def test_code_in_a_dataclass_field_or_typeddict_is_refused_naming_the_field() -> None:
    """Code nested in a dataclass's field or a TypedDict's value is found and named."""
    with pytest.raises(TypeError, match=r"parameter 'x' \(its field call\).*Callable.*a callable"):
        ember.cli(taking(Hooks, []), args=[])
    with pytest.raises(TypeError, match=r"parameter 'x' \(its field call\).*a callable"):
        ember.cli(taking(list[Calls], []), args=[])


def test_an_annotation_that_cannot_be_evaluated_is_refused() -> None:
    """A name an annotation uses that does not exist at run time (an import under
    TYPE_CHECKING only): refused, since jsonargparse would take any value for it."""

    def main(x: Missing = None) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(TypeError, match=r"cannot evaluate the annotations of main.*NameError"):
        ember.cli(main, args=[])


def code_or_data(leaves: st.SearchStrategy[object]) -> st.SearchStrategy[object]:
    """Annotations built from ``leaves`` in lists, dicts, tuples, unions and Annotated."""
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            inner.map(lambda part: list[part]),  # type: ignore[valid-type]
            inner.map(lambda part: dict[str, part]),  # type: ignore[valid-type]
            inner.map(lambda part: tuple[part, ...]),  # type: ignore[valid-type]
            st.tuples(inner, inner).map(lambda parts: Union[parts]),  # noqa: UP007
            inner.map(lambda part: Annotated[part, "doc"]),
        ),
        max_leaves=5,
    )


@settings(max_examples=40, deadline=None)
@given(
    data=code_or_data(st.sampled_from(DATA)),
    code=st.sampled_from(sorted(CODE)),
    where=st.randoms(use_true_random=False),
)
def test_an_annotation_is_refused_exactly_when_a_part_of_it_is_code(
    data: object, code: str, where: random.Random
) -> None:
    """Whatever the shape: data parts alone are accepted, and one part of code anywhere in
    them is refused at set-up."""
    from ember._experiment_cli import _data_classes

    _data_classes({"x": data})  # accepted
    annotation, _ = CODE[code]
    with_code = [data, annotation]
    where.shuffle(with_code)
    with pytest.raises(TypeError, match="main's parameter 'x'"):
        _data_classes({"x": Union[tuple(with_code)]})  # noqa: UP007
    with pytest.raises(TypeError, match="main's parameter 'x'"):
        _data_classes({"x": dict[str, list[Union[tuple(with_code)]]]})  # type: ignore[misc]  # noqa: UP007
