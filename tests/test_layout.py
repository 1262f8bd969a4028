"""The layout of ``src/ember``, read from the sources with ``ast`` (nothing is imported).

The rules: no import cycles, the data layer stands without the training layer, the library never
imports the application, implementation modules are private, package ``__init__`` files only
re-export, every module says what it is and what it exports, no module is a prefix satellite of
another (one concept per module, split by concept, never by size).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PUBLIC = {"ember", "ember.data", "ember.train", "ember.extend", "ember.distributed", "ember.runs"}
# ``python -m ember`` runs the application: a script, never imported, so it declares no __all__
SCRIPT = "ember.__main__"


@dataclass(frozen=True)
class Module:
    """One source file of ``src/ember``: its dotted name, path and parsed tree."""

    name: str
    path: Path
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"

    def within(self, package: str) -> bool:
        """Whether this module is ``package`` or lies under it."""
        return self.name == package or self.name.startswith(package + ".")


@cache
def modules() -> dict[str, Module]:
    found: dict[str, Module] = {}
    for path in sorted((SRC / "ember").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = Module(name, path, ast.parse(path.read_text(encoding="utf-8"), str(path)))
    return found


def imported(module: Module) -> Iterator[str]:
    """The ember modules ``module`` imports, anywhere in it (``TYPE_CHECKING`` blocks and
    function bodies too): ``from package import name`` counts as importing ``package.name``
    when that is a module, else ``package``."""
    known = modules()
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                package = module.name.split(".")
                if not module.is_package:
                    package = package[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    yield full
                elif base in known:
                    yield base


@cache
def graph() -> dict[str, frozenset[str]]:
    return {
        name: frozenset(dep for dep in imported(module) if dep != name)
        for name, module in modules().items()
    }


def find_cycle(edges: dict[str, frozenset[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None: a depth-first search that keeps
    the path it is on and reports the first edge back into it."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(node: str) -> list[str] | None:
        path.append(node)
        on_path.add(node)
        for dep in sorted(edges[node]):
            if dep in on_path:
                return [*path[path.index(dep) :], dep]
            if dep not in done:
                cycle = visit(dep)
                if cycle is not None:
                    return cycle
        path.pop()
        on_path.discard(node)
        done.add(node)
        return None

    for start in sorted(edges):
        if start not in done:
            cycle = visit(start)
            if cycle is not None:
                return cycle
    return None


def top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """The module's statements, with those of top-level ``if`` and ``try`` blocks."""
    pending = list(tree.body)
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.If | ast.Try):
            pending[:0] = [
                *node.body,
                *node.orelse,
                *(stmt for handler in getattr(node, "handlers", []) for stmt in handler.body),
            ]
        else:
            yield node


def defined(tree: ast.Module) -> set[str]:
    """The names bound at module level: definitions, assignments and imports."""
    names: set[str] = set()
    for node in top_level(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def declared_all(tree: ast.Module) -> list[str] | None:
    """The literal ``__all__`` of the module, or None when it has none."""
    for node in top_level(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and "__all__" in assigned_names(node):
            value = node.value
            assert isinstance(value, ast.List | ast.Tuple), "__all__ must be a literal list"
            return [ast.literal_eval(item) for item in value.elts]
    return None


def is_docstring(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def assigned_names(node: ast.stmt) -> set[str]:
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign):
        targets = [node.target]
    return {t.id for t in targets if isinstance(t, ast.Name)}


NAMES = sorted(modules())


def test_sources_are_found() -> None:
    """The walk sees the packages this file's rules are about."""
    assert PUBLIC | {"ember.app", SCRIPT} <= set(modules())


def test_no_import_cycles() -> None:
    """No module reaches itself through imports, type-only imports counted."""
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_find_cycle_reports_a_cycle() -> None:
    """The cycle search finds a cycle that is there, and none in a tree."""
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"b"})}
    assert find_cycle(edges) == ["b", "c", "b"]
    assert find_cycle({"a": frozenset({"b"}), "b": frozenset()}) is None


def test_relative_imports_are_resolved() -> None:
    """A relative import counts as importing the module it names."""
    tree = ast.parse("from .._vocabulary import Split\nfrom . import base\n")
    values = Module("ember.train._metric.values", SRC / "ember/train/_metric/values.py", tree)
    assert set(imported(values)) == {"ember.train._vocabulary", "ember.train._metric.base"}


@pytest.mark.parametrize("name", [n for n in NAMES if modules()[n].within("ember.data")])
def test_data_never_imports_train(name: str) -> None:
    """The data layer stands alone: no module of ember.data imports ember.train."""
    train = sorted(dep for dep in graph()[name] if modules()[dep].within("ember.train"))
    assert train == [], f"{name} imports {train}"


@pytest.mark.parametrize("name", NAMES)
def test_library_never_imports_the_application(name: str) -> None:
    """Only the application (``ember.app`` and ``python -m ember``) imports ``ember.app``."""
    if modules()[name].within("ember.app") or name == SCRIPT:
        return
    app = sorted(dep for dep in graph()[name] if modules()[dep].within("ember.app"))
    assert app == [], f"{name} imports the application: {app}"


def serves_moved_names(node: ast.stmt) -> bool:
    """``__getattr__ = moved_names(__name__)``: the hook serving 0.1.0's moved names."""
    return (
        assigned_names(node) == {"__getattr__"}
        and isinstance(node, ast.Assign)
        and ast.unparse(node.value) == "moved_names(__name__)"
    )


def is_alias_module(module: Module) -> bool:
    """A 0.1.0 module kept for old imports: a docstring, the import of ``moved_names``, an empty
    ``__all__`` and the hook, nothing else (no code can hide in it)."""
    body = module.tree.body
    return (
        len(body) == 4
        and is_docstring(body[0])
        and ast.unparse(body[1]) == "from ember._moved import moved_names"
        and assigned_names(body[2]) == {"__all__"}
        and serves_moved_names(body[3])
    )


@pytest.mark.parametrize("name", NAMES)
def test_modules_outside_the_public_namespaces_are_private(name: str) -> None:
    """A module is a public namespace, private (a ``_`` component), part of ``ember.app``, or
    a 0.1.0 module kept as an alias until its names' removal."""
    module = modules()[name]
    private = any(part.startswith("_") for part in name.split("."))
    assert name in PUBLIC or private or module.within("ember.app") or is_alias_module(module), (
        f"{name} is neither a public namespace nor private: name it with a leading _"
    )


@pytest.mark.parametrize("name", [n for n in NAMES if modules()[n].is_package])
def test_package_init_only_re_exports(name: str) -> None:
    """A package ``__init__`` holds a docstring, ``from ... import`` re-exports and ``__all__``
    (and ``ember.__version__``, and the hook serving 0.1.0's moved names), nothing else."""
    body = modules()[name].tree.body
    allowed = {"__all__", "__version__"} if name == "ember" else {"__all__"}
    for index, node in enumerate(body):
        if index == 0 and is_docstring(node):
            continue
        if isinstance(node, ast.ImportFrom) or serves_moved_names(node):
            continue
        names = assigned_names(node)
        assert names and names <= allowed, (
            f"{name}/__init__.py line {node.lineno}: only re-exports belong there, "
            f"found {type(node).__name__}"
        )


def exports_nothing(module: Module) -> bool:
    """A package ``__init__`` that is a docstring alone: it defines no name to declare."""
    return module.is_package and len(module.tree.body) == 1 and is_docstring(module.tree.body[0])


@pytest.mark.parametrize("name", [n for n in NAMES if n != SCRIPT])
def test_every_module_documents_and_declares_its_names(name: str) -> None:
    """Every module starts with a docstring and has an ``__all__`` of names it defines (a
    package ``__init__`` that is its docstring alone defines none)."""
    module = modules()[name]
    assert ast.get_docstring(module.tree), f"{name} has no module docstring"
    if exports_nothing(module):
        return
    exported = declared_all(module.tree)
    assert exported is not None, f"{name} has no __all__"
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    undefined = sorted(set(exported) - defined(module.tree))
    assert undefined == [], f"{name}.__all__ lists names it does not define: {undefined}"


def test_the_script_is_documented() -> None:
    """``python -m ember`` has a docstring too."""
    assert ast.get_docstring(modules()[SCRIPT].tree), f"{SCRIPT} has no module docstring"


def test_no_module_is_a_prefix_satellite() -> None:
    """One concept per module, split by concept, never by size: no two modules of a package
    share their first word (``_loop_plan``, ``_loop_state`` beside ``_loop``; ``_run_config``
    beside ``_run_logs``): a module is a line of the code map that names one concept."""
    packages: dict[str, dict[str, list[str]]] = {}
    for name, module in modules().items():
        if module.is_package or name == SCRIPT or is_alias_module(module):
            continue
        package, _, leaf = name.rpartition(".")
        first = leaf.lstrip("_").split("_")[0]
        packages.setdefault(package, {}).setdefault(first, []).append(leaf)
    satellites = {
        f"{package}: {sorted(leaves)}"
        for package, words in packages.items()
        for leaves in words.values()
        if len(leaves) > 1
    }
    assert satellites == set(), f"modules sharing a first word: {sorted(satellites)}"


LAYERED = {"ember", "ember.train"}
"""Packages whose own modules are layers of their own (the root's helpers, the training layer's
concepts); the folders below them are the units that must not import each other in a loop."""


def folder(name: str) -> str:
    """The folder a module belongs to: its package (a package's ``__init__`` is its own), or
    the module itself directly in a layered package (``ember._errors``, ``ember.train._loop``)."""
    if modules()[name].is_package:
        return name
    package = name.rpartition(".")[0]
    return name if package in LAYERED else package


def test_no_folder_level_import_loops() -> None:
    """Packages import each other one way: no loop between folders (``_metric`` importing
    ``_logger`` while ``_logger`` imports ``_metric``), type-only imports counted. Imports within
    one package's tree (a package and its subpackages) are not edges, nor is ``python -m ember``."""
    edges: dict[str, set[str]] = {}
    for name, deps in graph().items():
        if name == SCRIPT:
            continue
        here = folder(name)
        for dep in deps:
            there = folder(dep)
            if here == there or there.startswith(here + ".") or here.startswith(there + "."):
                continue  # within one package's tree (a renderer's tui/ uses its base)
            edges.setdefault(here, set()).add(there)
    nodes = set(edges) | {dep for deps in edges.values() for dep in deps}
    cycle = find_cycle({node: frozenset(edges.get(node, ())) for node in nodes})
    assert cycle is None, "folder-level import loop: " + " -> ".join(cycle or [])


BELOW = {
    "ember.data": ("ember.data.",),
    "ember.train._metric": ("ember.train._metric.", "ember.data", "ember.train._vocabulary"),
    "ember._rundir": ("ember._rundir.",),
}
"""What the bottom packages may import besides ember's private helpers at the root."""


def is_root_helper(name: str) -> bool:
    """A private module at the root (``ember._errors``) or in a private package there (the run
    directory's formats, ``ember._rundir.manifest``): below every layer, the helpers all share."""
    parts = name.split(".")
    return len(parts) > 1 and parts[1].startswith("_") and name in modules()


@pytest.mark.parametrize("package", sorted(BELOW))
def test_no_upward_imports(package: str) -> None:
    """The data layer, the metric package and the run directory's formats stand below what uses
    them: the data layer imports only its own modules (never its package's ``__init__``), the
    metric package the data layer and the vocabulary (``Split``), never a logger, renderer or
    the summary; the formats (``ember._rundir``), which the writers in ``ember.train`` and the
    readers in ``ember.runs`` stand on, import neither of them (nor the data layer)."""
    allowed = BELOW[package]
    upward = sorted(
        f"{name} -> {dep}"
        for name, deps in graph().items()
        if modules()[name].within(package) and not modules()[name].is_package
        for dep in deps
        if not (is_root_helper(dep) and not modules()[dep].within(package))
        if not any(dep == prefix or dep.startswith(prefix) for prefix in allowed) or dep == package
    )
    assert upward == [], f"upward imports: {upward}"


def is_private_in(name: str, package: str) -> bool:
    """Whether ``name`` is a private module of ``package`` (a ``_`` component below it)."""
    if not modules()[name].within(package) or name == package:
        return False
    return any(part.startswith("_") for part in name[len(package) + 1 :].split("."))


def test_the_readers_use_only_the_training_layers_public_names() -> None:
    """``ember.runs`` (the readers) imports no private module of ``ember.train``: what both
    need of a run directory's files is the formats' package (``ember._rundir``) they stand on,
    and the rest comes through ``ember.train``'s public names."""
    private = sorted(
        f"{name} -> {dep}"
        for name, deps in graph().items()
        if modules()[name].within("ember.runs")
        for dep in deps
        if is_private_in(dep, "ember.train")
    )
    assert private == [], f"ember.runs imports private modules of ember.train: {private}"


def test_the_training_layer_never_imports_the_readers() -> None:
    """``ember.train`` never imports ``ember.runs``, not even inside a function: the readers
    stand above the training layer (the ``curves`` artifact is drawn by ``ember._rundir``)."""
    readers = sorted(
        f"{name} -> {dep}"
        for name, deps in graph().items()
        if modules()[name].within("ember.train")
        for dep in deps
        if modules()[dep].within("ember.runs")
    )
    assert readers == [], f"ember.train imports ember.runs: {readers}"


SEAMS = {
    "ember.data._limited": "the first N batches of a loader, for the debugging modes",
    "ember.data._rank_view": "one rank's view of a loader, for the data-parallel strategies",
    "ember.data._torch_loader": "a user's torch DataLoader as an ember loader (builder, Evaluator)",
    "ember.distributed._processes": "the process group formed from torchrun's environment",
    "ember.distributed._progress": "how far a spawned rank got, for spawn's report",
}
"""The private modules of other packages the training layer may import: one seam per need."""


def test_train_reaches_into_other_packages_only_through_their_seams() -> None:
    """``ember.train`` uses another package through its public names; the few private modules
    it needs (``SEAMS``) are the only ones, so a package's insides can change without the
    training layer noticing. Devices and the other helpers all packages share sit at the root,
    the run directory's formats among them (``ember._rundir``: a private package whose modules
    are the helpers, named without ``_``)."""
    reached = sorted(
        f"{name} -> {dep}"
        for name, deps in graph().items()
        if modules()[name].within("ember.train")
        for dep in deps
        if not modules()[dep].within("ember.train") and dep.count(".") > 1
        if dep.rpartition(".")[2].startswith("_") and dep not in SEAMS
    )
    assert reached == [], f"private modules of other packages: {reached}"


DESIGN = SRC.parent / "docs" / "design.md"


def code_map() -> set[str]:
    """The modules ``docs/design.md``'s code map has a line for, as dotted names."""
    text = DESIGN.read_text(encoding="utf-8").split("## Code map", 1)[1]
    found: set[str] = set()
    package = "ember"
    for line in text.splitlines():
        heading = re.match(r"\*\*`([\w.]+)`\*\*", line)
        if heading:
            package = heading.group(1)
            continue
        entry = re.match(r"- ((?:`[\w/.]+\.py`(?:, )?)+) —", line)
        if entry:
            for path in re.findall(r"`([\w/.]+)\.py`", entry.group(1)):
                parts = [part for part in path.split("/") if part != "__init__"]
                found.add(".".join([package, *parts]) if parts else package)
    return found


def test_the_code_map_names_every_module() -> None:
    """Every module of ``src/ember`` has its line in ``docs/design.md``'s code map, and every
    line names a module that exists: the map a newcomer reads is the code."""
    documented, present = code_map(), set(modules())
    assert sorted(present - documented) == [], "modules missing from the code map"
    assert sorted(documented - present) == [], "code map lines for modules that do not exist"
