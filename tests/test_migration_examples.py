"""The migration guides (``docs/migrate/``) and their ember halves (``examples/migrate/``): each
script runs and does what its guide says; each guide shows its script as it is, its other ember
code compiles and imports, its links lead somewhere, and its line counts are the scripts'.

The "before" halves (Lightning, ``transformers.Trainer``, Keras) are code blocks of the guides,
never run: those libraries are not ember's dependencies. They are counted, not executed."""

from __future__ import annotations

import ast
import importlib
import io
import json
import math
import os
import re
import subprocess
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import ember
import ember.runs
from ember import DataLoaderBuilder, SupervisedTraining
from ember.train import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "migrate"
GUIDES = ROOT / "docs" / "migrate"
NAMES = ("lightning", "transformers", "keras")


def count_code_lines(source: str) -> int:
    """The lines of ``source`` that hold code: not blank, not only a comment, not part of a
    docstring (of the module, a class or a function). A statement over several lines counts
    each of them, as a reader sees them. The guides' line counts are this."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    layout = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in layout and token.type != tokenize.ENDMARKER:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def count_yaml_lines(text: str) -> int:
    """The lines of a YAML file that hold a value: not blank, not only a comment."""
    return sum(
        1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )


def without_docstring(source: str) -> str:
    """A script's code after its module docstring, as its guide shows it."""
    first = ast.parse(source).body[0]
    assert isinstance(first, ast.Expr), "the script starts with its module docstring"
    return "\n".join(source.splitlines()[first.end_lineno :]).strip("\n")


@dataclass(frozen=True)
class Block:
    """A fenced code block of a guide: its language, its title (``title="..."``) and code."""

    language: str
    title: str
    code: str


_FENCE = re.compile(r"^```(?P<language>\w*)(?P<info>[^\n]*)\n(?P<code>.*?)^```$", re.M | re.S)


def blocks(name: str) -> list[Block]:
    text = (GUIDES / f"{name}.md").read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        title = re.search(r'title="([^"]+)"', match["info"])
        code = match["code"].rstrip("\n")
        found.append(Block(match["language"], title[1] if title else "", code))
    return found


def titled(name: str, title: str) -> Block:
    matching = [block for block in blocks(name) if block.title == title]
    assert len(matching) == 1, f"docs/migrate/{name}.md has {len(matching)} blocks titled {title}"
    return matching[0]


def run_example(script: str, *args: str, cwd: Path) -> str:
    """Run ``examples/migrate/{script}`` with this ember in a fresh interpreter; its stdout."""
    source = str(Path(ember.__file__).resolve().parents[1])  # the ember under test, not another
    path = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "EMBER_RENDERER": "cli", "HF_HUB_OFFLINE": "1"}
    finished = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
        env=env,
        check=False,
    )
    assert finished.returncode == 0, finished.stderr[-5000:]
    return finished.stdout


def test_the_lightning_example_trains_from_its_yaml_and_its_config_yaml_trains_it_again(
    tmp_path: Path,
) -> None:
    """lightning_after.py with its YAML (2 epochs): the trainer's options and the data module's
    arguments are recorded in the run's config.yaml, the best epoch is tested, and --config on
    that config.yaml trains the same run again, weight for weight, in the next version."""
    pytest.importorskip("jsonargparse", reason="ember.cli: pip install ember[cli]")
    pytest.importorskip("sklearn", reason="the digits: pip install ember[examples]")
    yaml = pytest.importorskip("yaml")
    runs = tmp_path / "runs"
    config = str(EXAMPLES / "lightning_after.yaml")
    run_example(
        "lightning_after.py", "--config", config, "--directory", str(runs),
        "--training.num_epochs", "2", cwd=tmp_path,
    )  # fmt: skip
    first = runs / "version_0"
    recorded = yaml.safe_load((first / "config.yaml").read_text(encoding="utf-8"))
    assert recorded["training"]["num_epochs"] == 2 and recorded["training"]["seed"] == 0
    assert recorded["training"]["early_stopping"]["metric"] == "Loss"
    sizes = {"batch_size": 32, "valid_size": 297, "test_size": 300}
    assert recorded["data"] == sizes  # plain values: no class_path, nothing to import
    facts = json.loads((first / "config.json").read_text(encoding="utf-8"))
    assert facts["data_module"]["attributes"] == sizes and facts["seed"] == 0
    tests = json.loads((first / "test" / "summary.json").read_text(encoding="utf-8"))["tests"]
    accuracy = next(row["value"] for row in tests if row["metric"] == "Accuracy")
    assert accuracy > 80.0  # ~90 % after two epochs; a model that did not learn has ~10 %
    assert ember.runs.load(first).best_epoch == 2

    run_example("lightning_after.py", "--config", str(first / "config.yaml"), cwd=tmp_path)
    second = runs / "version_1"
    for log in ("train/epoch-2/Loss.log", "valid/epoch-2/Accuracy.log"):
        assert (second / log).read_bytes() == (first / log).read_bytes(), log
    again = load_file(second / "checkpoint" / "model-2.safetensors")
    for name, weight in load_file(first / "checkpoint" / "model-2.safetensors").items():
        assert torch.equal(again[name], weight), name


def test_the_transformers_example_trains_in_steps_and_exports_its_best_model(
    tmp_path: Path,
) -> None:
    """transformers_after.py in miniature (6 steps, validating and checkpointing every 3): the
    valid loss falls, and the export loads with from_pretrained, holding the best weights."""
    pytest.importorskip("jsonargparse", reason="ember.cli: pip install ember[cli]")
    transformers = pytest.importorskip("transformers", reason="pip install ember[hf]")
    yaml = pytest.importorskip("yaml")
    directory = tmp_path / "gpt2"
    run_example(
        "transformers_after.py", "--directory", str(directory),
        "--training.max_steps", "6", "--training.validate_every.steps", "3",
        "--training.checkpoint_every.steps", "3", "--training.limit_batches.valid", "4",
        cwd=tmp_path,
    )  # fmt: skip
    run = ember.runs.load(directory)
    losses = run.values("valid", "Loss")
    assert list(losses) == [1, 2] and losses[2] < losses[1] < math.log(256)  # below chance
    recorded = yaml.safe_load((directory / "config.yaml").read_text(encoding="utf-8"))
    assert recorded["training"]["precision"] == "bf16-mixed"
    assert recorded["training"]["grads_accumulation_mean"] is True
    exported = transformers.GPT2LMHeadModel.from_pretrained(directory / "hf")
    best = load_checkpoint(directory, "best", into=transformers.GPT2LMHeadModel(exported.config))
    assert run.best_epoch == 2
    for (name, weight), theirs in zip(
        best.state_dict().items(), exported.state_dict().values(), strict=True
    ):
        assert torch.equal(weight, theirs), name


def test_the_keras_example_fits_evaluates_its_best_epoch_and_predicts(tmp_path: Path) -> None:
    """keras_after.py for 3 epochs: History's values printed per epoch, the best epoch's test
    accuracy in percent, and eight predictions, each a digit."""
    pytest.importorskip("jsonargparse", reason="ember.cli: pip install ember[cli]")
    pytest.importorskip("sklearn", reason="the digits: pip install ember[examples]")
    directory = tmp_path / "keras"
    stdout = run_example(
        "keras_after.py", "--epochs", "3", "--directory", str(directory), cwd=tmp_path
    )
    history = re.search(r"valid accuracy by epoch: \{(.*)\}", stdout)
    assert history is not None and re.findall(r"(\d+): ", history[1]) == ["1", "2", "3"]
    tested = re.search(r"Test accuracy of epoch (\d+): ([\d.]+) %", stdout)
    assert tested is not None, stdout[-2000:]
    assert int(tested[1]) == ember.runs.load(directory).best_epoch
    assert float(tested[2]) > 80.0  # ~90 % after three epochs
    predicted = re.search(r"predicted: \[(.*)\] labels: \[(.*)\]", stdout)
    assert predicted is not None
    digits = [int(digit) for digit in predicted[1].split(",")]
    assert len(digits) == 8 and all(0 <= digit <= 9 for digit in digits)
    assert (directory / "test" / "summary.json").is_file()


@pytest.mark.parametrize("name", NAMES)
def test_each_guide_shows_its_ember_half_as_it_is(name: str) -> None:
    """The guide's after block is the example file (less its docstring), and the Lightning
    guide's after YAML is the file beside it."""
    script = EXAMPLES / f"{name}_after.py"
    shown = titled(name, f"examples/migrate/{name}_after.py")
    assert shown.code == without_docstring(script.read_text(encoding="utf-8"))
    if name == "lightning":
        config = EXAMPLES / "lightning_after.yaml"
        shown = titled(name, "examples/migrate/lightning_after.yaml")
        assert shown.code == config.read_text(encoding="utf-8").strip("\n")


@pytest.mark.parametrize("name", NAMES)
def test_each_guides_python_compiles_and_its_ember_imports_exist(name: str) -> None:
    """Every Python block compiles (the other library's too); every ember name a block
    imports exists where it is imported from."""
    python = [block for block in blocks(name) if block.language == "python"]
    assert python, f"docs/migrate/{name}.md has no Python block"
    for block in python:
        tree = ast.parse(block.code, f"docs/migrate/{name}.md: {block.title or block.code[:40]}")
        compile(tree, f"docs/migrate/{name}.md", "exec")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ember"):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{node.module} has no {alias.name}"


@pytest.mark.parametrize("name", NAMES)
def test_each_guides_builder_calls_are_methods(name: str) -> None:
    """Each builder call a guide names in passing (`.num_epochs(30)`, `.shuffle(0)`) is a
    method of SupervisedTraining or of DataLoaderBuilder."""
    text = (GUIDES / f"{name}.md").read_text(encoding="utf-8")
    called = set(re.findall(r"`\.(\w+)\(", text))
    assert called
    unknown = {
        method
        for method in called
        if not hasattr(SupervisedTraining, method) and not hasattr(DataLoaderBuilder, method)
    }
    assert not unknown, f"docs/migrate/{name}.md names builder methods that do not exist"


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M):
        slug = _slug(heading)
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


@pytest.mark.parametrize("name", NAMES)
def test_each_guides_links_lead_to_a_page_and_heading(name: str) -> None:
    """Every relative link of a guide leads to a file of the repository and, with an anchor,
    to a heading of that page."""
    guide = GUIDES / f"{name}.md"
    text = re.sub(r"^```.*?^```", "", guide.read_text(encoding="utf-8"), flags=re.M | re.S)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        target, _, anchor = link.partition("#")
        page = (guide.parent / target).resolve() if target else guide
        assert page.is_file(), f"{guide.name}: {link} leads to no file"
        if anchor:
            assert anchor in _anchors(page), f"{guide.name}: {link} names no heading"


@pytest.mark.parametrize("name", NAMES)
def test_each_guides_line_counts_are_its_scripts(name: str) -> None:
    """The guide's table of lines is count_code_lines of its before block and its after
    script (and, for Lightning, the YAML files' lines)."""
    text = (GUIDES / f"{name}.md").read_text(encoding="utf-8")
    rows = {
        kind: (int(before), int(after))
        for kind, before, after in re.findall(
            r"^\| (Python|YAML) \| (\d+) \| (\d+) \|$", text, re.M
        )
    }
    before = titled(name, f"{name}_before.py").code
    after = (EXAMPLES / f"{name}_after.py").read_text(encoding="utf-8")
    assert rows.pop("Python") == (count_code_lines(before), count_code_lines(after))
    if name == "lightning":
        before_yaml = titled(name, "lightning_before.yaml").code
        after_yaml = (EXAMPLES / "lightning_after.yaml").read_text(encoding="utf-8")
        assert rows.pop("YAML") == (count_yaml_lines(before_yaml), count_yaml_lines(after_yaml))
    assert not rows


def test_counting_leaves_out_blanks_comments_and_docstrings() -> None:
    """count_code_lines counts each line a statement spans, and no docstring or comment."""
    source = '''"""Module doc,
over two lines."""

import torch  # a comment after code counts


def f(x: int) -> int:
    """Its doc."""
    # a comment alone
    return (
        x
        + 1
    )
'''
    assert count_code_lines(source) == 6  # import, def, and the four lines of return
