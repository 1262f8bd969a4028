"""No code under src/ can load pickle or run strings as code ("verified checkpoints")."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"
PICKLE_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "shelve", "marshal"}
RUN_CODE = {"eval", "exec"}


def offences(source: str) -> list[str]:
    """``line: what`` for each use of a pickle module, ``torch[.x].load``, ``eval(``/``exec(``
    or ``allow_pickle=True``; comments and strings are not code and are ignored."""
    tokens = [
        token
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type in (tokenize.NAME, tokenize.OP, tokenize.NEWLINE)
    ]
    found = []
    for i, token in enumerate(tokens):
        before = tokens[i - 1].string if i > 0 else ""
        after = tokens[i + 1].string if i + 1 < len(tokens) else ""
        where = f"line {token.start[0]}"
        if token.type != tokenize.NAME:
            continue
        if token.string in PICKLE_MODULES:
            found.append(f"{where}: {token.string}")
        elif token.string in RUN_CODE and after == "(" and before not in (".", "def"):
            # a method named eval (Burn's Evaluator.eval) is defined, not run
            found.append(f"{where}: {token.string}(")
        elif token.string == "load" and _torch_chain(tokens, i):
            found.append(f"{where}: torch load")
        elif token.string == "allow_pickle" and after == "=" and _next(tokens, i + 2) == "True":
            found.append(f"{where}: allow_pickle=True")
    return found


def _next(tokens: list[tokenize.TokenInfo], index: int) -> str:
    return tokens[index].string if index < len(tokens) else ""


def _torch_chain(tokens: list[tokenize.TokenInfo], index: int) -> bool:
    """Whether tokens[index] ends ``torch.a.b.load`` or is imported by ``from torch... import``."""
    j = index
    while j >= 2 and tokens[j - 1].string == "." and tokens[j - 2].type == tokenize.NAME:
        j -= 2
    if j < index and tokens[j].string == "torch":
        return True
    start = index
    while start > 0 and tokens[start - 1].type != tokenize.NEWLINE:
        start -= 1
    line = [token.string for token in tokens[start:index]]
    return line[:2] == ["from", "torch"]


def source_files() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_src_never_loads_pickle_or_runs_strings() -> None:
    """Every .py file under src/ is free of pickle, torch.load, eval( and exec(."""
    files = source_files()
    assert len(files) > 5, f"no sources found under {SRC}"
    problems = {
        str(path.relative_to(SRC)): found
        for path in files
        if (found := offences(path.read_text(encoding="utf-8")))
    }
    assert problems == {}


@pytest.mark.parametrize(
    "code",
    [
        "import pickle\n",
        "from pickle import loads\n",
        "x = pickle.loads(data)\n",
        "import dill as d\n",
        "state = torch.load(path)\n",
        "state = torch.load(path, weights_only=True)\n",
        "m = torch.jit.load(path)\n",
        "from torch import load\n",
        "from torch.serialization import load\n",
        "eval('1 + 1')\n",
        "exec(code, {})\n",
        "f = (eval)(x) if False else eval (x)\n",
        "np.load(path, allow_pickle=True)\n",
    ],
)
def test_scanner_catches(code: str) -> None:
    """The scanner flags each forbidden use."""
    assert offences(code)


@pytest.mark.parametrize(
    "code",
    [
        "model.eval()\n",
        "def eval(self, name, loader):\n    pass\n",
        "# import pickle\n",
        "'''never torch.load or pickle; eval(x)'''\n",
        "s = 'exec(x)'\n",
        "evaluate(x)\n",
        "safetensors.torch.load(data)\n",
        "np.load(path, allow_pickle=False)\n",
        "from torch import nn\n",
        "load(x)\n",
    ],
)
def test_scanner_ignores(code: str) -> None:
    """Comments, strings, methods named eval and safetensors' loader are fine."""
    assert offences(code) == []
