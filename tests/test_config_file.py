"""``ember.cli``'s ``--config`` file: the one file a command line reads, refused (exit 2, the
file named) unless it is a regular file under the size cap, UTF-8, YAML whose aliases are
bounded; nothing else in a config or the environment makes ember.cli read a file."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ember
from ember._config_file import (
    MAX_ALIAS_NODES,
    MAX_BYTES,
    MAX_DEPTH,
    MAX_OPTION_VALUES,
    dump_config,
    read_config,
)

pytest.importorskip("jsonargparse", reason="ember.cli needs jsonargparse: pip install ember[cli]")
yaml = pytest.importorskip("yaml")  # jsonargparse's dependency

SCRIPT = """
from dataclasses import dataclass
from typing import Any

import ember


@dataclass(frozen=True)
class Data:
    batch_size: int = 4


def main(epochs: int = 1, data: Data = Data(), extra: Any = None) -> None:
    print("main ran:", epochs, data.batch_size, extra)


ember.cli(main)
"""

SECRET = "SECRET_TOKEN=hunter2"


def run(
    directory: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python train.py ARGS`` in ``directory``: a script whose ``main`` takes an ``epochs``,
    a dataclass group ``data`` and an ``extra: Any``. The timeout is the check that nothing
    hangs or runs for minutes (a FIFO, a billion laughs, 500 MB)."""
    script = directory / "train.py"
    script.write_text(SCRIPT, encoding="utf-8")
    command = [sys.executable, str(script), *args]
    environment = {**os.environ, **(env or {})}
    return subprocess.run(
        command, cwd=directory, capture_output=True, text=True, timeout=120, env=environment
    )


def billion_laughs() -> str:
    """About 500 bytes of nested aliases that stand for 9**10 strings."""
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    return "\n".join([*lines, "extra: *a9", ""])


ATTACKS: dict[str, tuple[str, str]] = {
    "a billion laughs": ("bomb.yaml", "aliases repeat"),
    "a FIFO": ("fifo.yaml", "is a FIFO, not a regular file"),
    "a directory": ("folder", "is a directory, not a regular file"),
    "a device": ("/dev/zero", "is a character device, not a regular file"),
    "500 MB": ("huge.yaml", f"more than the {MAX_BYTES} bytes"),
    "not UTF-8": ("latin1.yaml", "is not UTF-8 text (byte 10 is 0xe9)"),
    "not YAML": ("broken.yaml", "is not valid YAML"),
    "not a mapping": ("list.yaml", "holds a list, not options"),
    "an alias inside itself": ("loop.yaml", "an alias refers to a value it is inside of"),
    "too deep": ("deep.yaml", f"values nest more than {MAX_DEPTH} deep"),
    "a list of 400,000 numbers": ("long.yaml", f"more than the {MAX_OPTION_VALUES} values"),
    "missing": ("missing.yaml", "cannot be read: No such file or directory"),
}


def make(directory: Path, name: str) -> str:
    """The file ``ATTACKS`` names, made in ``directory``; its path."""
    path = directory / name
    if name == "bomb.yaml":
        path.write_text(billion_laughs(), encoding="utf-8")
    elif name == "fifo.yaml":
        os.mkfifo(path)
    elif name == "folder":
        path.mkdir()
    elif name == "huge.yaml":
        with path.open("wb") as file:  # sparse: 500 MB that take no disk
            file.truncate(500 * 1024 * 1024)
    elif name == "latin1.yaml":
        path.write_bytes("extra: caf\u00e9\n".encode("latin-1"))
    elif name == "broken.yaml":
        path.write_text("epochs: [1, 2\n", encoding="utf-8")
    elif name == "list.yaml":
        path.write_text("- 1\n- 2\n", encoding="utf-8")
    elif name == "loop.yaml":
        path.write_text("extra: &a [1, *a]\n", encoding="utf-8")
    elif name == "deep.yaml":
        path.write_text(f"extra: {'[' * 200}{']' * 200}\n", encoding="utf-8")
    elif name == "long.yaml":  # 3.4 MB: jsonargparse would check it for days
        path.write_text("extra:\n" + "".join(f"- {i}\n" for i in range(400_000)), encoding="utf-8")
    return name if name.startswith("/") else str(path)


@pytest.mark.parametrize("case", sorted(ATTACKS))
def test_a_config_file_ember_cli_will_not_read_exits_2_naming_it(case: str, tmp_path: Path) -> None:
    """The audit's files: a FIFO does not hang, a 1 KB billion laughs and a 500 MB file are
    refused at once, a non-UTF-8 file is no traceback, and a long list that jsonargparse would
    check for days is refused from its length: exit 2 with the file and its problem named,
    before main runs."""
    name, problem = ATTACKS[case]
    path = make(tmp_path, name)
    finished = run(tmp_path, "--config", path)
    assert finished.returncode == 2, finished.stderr
    assert f"--config {path}" in finished.stderr and problem in finished.stderr, finished.stderr
    assert "Traceback" not in finished.stderr and "main ran" not in finished.stdout


def test_a_nested_config_key_reads_no_file(tmp_path: Path) -> None:
    """The audit's leak: `config: SECRET_FILE` in a config once read the file and printed it in
    the refusal; now the key is refused, the file never read."""
    secret = tmp_path / "secret.env"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    config = tmp_path / "exp.yaml"
    config.write_text(f"epochs: 2\nconfig: {secret}\n", encoding="utf-8")
    finished = run(tmp_path, "--config", str(config))
    assert finished.returncode == 2
    assert f"--config {config} has a key 'config'" in finished.stderr
    assert "hunter2" not in finished.stderr + finished.stdout


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--config", "{config}"], "'data' is a str, not a mapping of its fields"),
        (["--data", "{secret}"], "unrecognized arguments: --data"),
        (["--data={secret}"], "unrecognized arguments: --data"),
    ],
    ids=["data: FILE in a config", "--data FILE", "--data=FILE"],
)
def test_a_dataclass_group_reads_no_file(args: list[str], refusal: str, tmp_path: Path) -> None:
    """jsonargparse let a dataclass group be a file (`data: FILE`, `--data FILE`): refused, the
    file never read, its keys never printed."""
    secret = tmp_path / "secret.yaml"
    secret.write_text("hunter2: 1\n", encoding="utf-8")
    config = tmp_path / "exp.yaml"
    config.write_text(f"data: {secret}\n", encoding="utf-8")
    filled = [arg.format(config=config, secret=secret) for arg in args]
    finished = run(tmp_path, *filled)
    assert finished.returncode == 2
    assert refusal in finished.stderr
    assert "hunter2" not in finished.stderr + finished.stdout


def test_the_environment_reads_no_option_and_no_file(tmp_path: Path) -> None:
    """JSONARGPARSE_DEFAULT_ENV=true would make jsonargparse read TRAIN_CONFIG=FILE (and print
    it) and every option from the environment: ember.cli reads neither."""
    secret = tmp_path / "secret.env"
    secret.write_text(SECRET + "\n", encoding="utf-8")
    environment = {"JSONARGPARSE_DEFAULT_ENV": "true", "TRAIN_CONFIG": str(secret)}
    finished = run(tmp_path, env={**environment, "TRAIN_EPOCHS": "7", "TRAIN_DATA": str(secret)})
    assert finished.returncode == 0, finished.stderr
    assert "main ran: 1 4 None" in finished.stdout
    assert "hunter2" not in finished.stderr + finished.stdout


def test_a_billion_laughs_on_the_command_line_exits_2(tmp_path: Path) -> None:
    """An option's YAML value has its aliases bounded as a file's: jsonargparse would print
    the expanded value in its refusal, for hours."""
    bomb = "&a0 [x, x, x, x, x, x, x, x, x]"
    for level in range(1, 10):
        bomb = f"&a{level} [{bomb}, {', '.join([f'*a{level - 1}'] * 8)}]"
    finished = run(tmp_path, "--epochs", bomb)
    assert finished.returncode == 2
    assert "aliases repeat" in finished.stderr and "on the command line" in finished.stderr


def test_a_link_to_a_regular_file_is_read(tmp_path: Path) -> None:
    """A symbolic link to a regular file is that file."""
    target = tmp_path / "real.yaml"
    target.write_text("epochs: 3\ndata:\n  batch_size: 8\n", encoding="utf-8")
    (tmp_path / "link.yaml").symlink_to(target)
    finished = run(tmp_path, "--config", "link.yaml")
    assert finished.returncode == 0, finished.stderr
    assert "main ran: 3 8 None" in finished.stdout


def test_aliases_within_the_bound_and_an_empty_file_are_read(tmp_path: Path) -> None:
    """Anchors used as configs use them (a block repeated a few times, a merge key) are
    read; an empty file holds no options."""
    text = (
        "base: &base {lr: 1.0e-3, betas: [0.9, 0.99]}\n"
        "extra:\n  one: *base\n  two: {<<: *base, lr: 0.5}\n  many: [*base, *base, *base]\n"
    )
    path = tmp_path / "anchors.yaml"
    path.write_text(text, encoding="utf-8")
    base = {"lr": 1.0e-3, "betas": [0.9, 0.99]}
    assert read_config(str(path))["extra"] == {
        "one": base,
        "two": {**base, "lr": 0.5},
        "many": [base, base, base],
    }
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert read_config(str(tmp_path / "empty.yaml")) == {}


def test_the_alias_bound_counts_the_values_repeated(tmp_path: Path) -> None:
    """MAX_ALIAS_NODES aliases to one value, in options of a thousand each, are read; one more
    is refused."""
    for count, allowed in ((MAX_ALIAS_NODES, True), (MAX_ALIAS_NODES + 1, False)):
        options = [", ".join(["*a"] * min(1000, count - start)) for start in range(0, count, 1000)]
        text = "a: &a 1\n" + "".join(f"x{i}: [{items}]\n" for i, items in enumerate(options))
        path = tmp_path / f"{count}.yaml"
        path.write_text(text, encoding="utf-8")
        if allowed:
            assert sum(len(v) for k, v in read_config(str(path)).items() if k != "a") == count
        else:
            with pytest.raises(ValueError, match=f"aliases repeat {count} values"):
                read_config(str(path))


@pytest.mark.parametrize(
    ("value", "around"),
    [
        ("[{items}]", 0),  # a list of n numbers: n values
        ("{{a: [{items}]}}", 2),  # a key, its list and the list's items: n + 2
        ("[[{items}]]", 1),  # the inner list and its items: n + 1
    ],
    ids=["a list", "a mapping of a list", "a list of a list"],
)
def test_an_option_holds_at_most_max_option_values(value: str, around: int, tmp_path: Path) -> None:
    """jsonargparse checks a list in a time that grows with the square of its length: an option
    of MAX_OPTION_VALUES values, nested ones counted, is read; one more is refused, naming the
    option and its line."""
    for extra, allowed in ((0, True), (1, False)):
        items = ", ".join(["7"] * (MAX_OPTION_VALUES - around + extra))
        path = tmp_path / "long.yaml"
        path.write_text(f"epochs: 2\nextra: {value.format(items=items)}\n", encoding="utf-8")
        if allowed:
            assert read_config(str(path))["epochs"] == 2
        else:
            with pytest.raises(ValueError, match=r"the option 'extra' \(line 2, column 1\) holds"):
                read_config(str(path))


def test_a_long_value_on_the_command_line_exits_2(tmp_path: Path) -> None:
    """An option's value on the command line is bounded as a file's option is."""
    numbers = ", ".join(["1"] * (MAX_OPTION_VALUES + 1))
    finished = run(tmp_path, "--extra", f"[{numbers}]")
    assert finished.returncode == 2
    assert "on the command line" in finished.stderr
    assert f"more than the {MAX_OPTION_VALUES} values an option may hold" in finished.stderr


def test_numbers_and_dates_read_as_jsonargparse_reads_them(tmp_path: Path) -> None:
    """`1e-3` is a float (YAML 1.1 wants 1.0e-3), a date stays text, and no tag builds an
    object (`!!python/object/apply:os.system` is refused as YAML)."""
    path = tmp_path / "numbers.yaml"
    path.write_text("lr: 1e-3\nsteps: 1e3\nday: 2024-01-01\n", encoding="utf-8")
    assert read_config(str(path)) == {"lr": 1e-3, "steps": 1e3, "day": "2024-01-01"}
    path.write_text("x: !!python/object/apply:os.system [touch pwned]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="is not valid YAML"):
        read_config(str(path))
    assert not (tmp_path / "pwned").exists()


# text without control characters and line separators: PyYAML's own dump and load do not
# round-trip those ('\x85' comes back as ' ')
TEXT = st.text(st.characters(exclude_categories=["Cc", "Cs", "Zl", "Zp"]))
JSON_LIKE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(options=st.dictionaries(TEXT.filter(bool), JSON_LIKE, max_size=5))
def test_what_ember_cli_writes_reads_back_the_same(
    options: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Any JSON-like options, written as ember.cli writes a run's config.yaml, read back as
    they were: a string that reads as a number (a key '0E0', a value '1e5') is quoted."""
    path = tmp_path_factory.mktemp("dump") / "config.yaml"
    path.write_text(dump_config(options), encoding="utf-8")
    assert read_config(str(path)) == options


def test_a_string_that_reads_as_a_number_is_quoted(tmp_path: Path) -> None:
    """The strings '0E0' and '1e5' come back as strings, not floats (yaml.safe_dump writes them
    bare, and the loader reads 1e5 as jsonargparse does: a float)."""
    path = tmp_path / "config.yaml"
    path.write_text(dump_config({"0E0": "1e5", "lr": 1e-3}), encoding="utf-8")
    assert read_config(str(path)) == {"0E0": "1e5", "lr": 1e-3}


@dataclass(frozen=True)
class Optimizer:
    """The optimizer's values."""

    lr: float = 1e-3
    day: str = "2024-01-01"


def test_a_runs_config_yaml_round_trips_through_the_safe_loader(tmp_path: Path) -> None:
    """The YAML a run records, given back with --config, gives main the same values: an Any
    mapping with a class_path key stays a mapping."""
    from ember.train._experiment import current_experiment

    recorded: list[str] = []
    seen: list[tuple[Optimizer, object]] = []

    def main(optimizer: Optimizer = Optimizer(), extra: Any = None) -> None:
        experiment = current_experiment()
        assert experiment is not None
        recorded.append(experiment.yaml)
        seen.append((optimizer, extra))

    extra = {"class_path": "os.system", "init_args": {"command": "touch x"}, "rate": 1e-4}
    first = tmp_path / "first.yaml"
    first.write_text(yaml.safe_dump({"extra": extra, "optimizer": {"lr": 0.5}}), encoding="utf-8")
    ember.cli(main, args=["--config", str(first)])
    again = tmp_path / "config.yaml"
    again.write_text(recorded[0], encoding="utf-8")
    ember.cli(main, args=["--config", str(again)])
    assert seen[0] == seen[1] == (Optimizer(lr=0.5), extra)
    assert recorded[0] == recorded[1]
