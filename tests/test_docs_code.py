"""The guides' Python: every block of docs/*.md and the README parses, and every name it
imports from ember exists there (a renamed or mistyped name in the docs fails here)."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```python[^\n]*\n(.*?)^```", re.M | re.S)


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_python_block_parses_and_imports_what_ember_has(page: Path) -> None:
    """Each ```python block of the page is valid Python; each `from ember... import name`
    names something ember exports there."""
    for number, block in enumerate(_FENCE.findall(page.read_text(encoding="utf-8")), 1):
        tree = ast.parse(block, f"{page.name}, Python block {number}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ember"):
                module = importlib.import_module(node.module or "")
                missing = [a.name for a in node.names if not hasattr(module, a.name)]
                assert missing == [], f"{page.name} block {number}: {node.module} has no {missing}"
