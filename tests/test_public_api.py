"""The public surface, pinned: ``tests/api/current.txt`` holds every public name and member
with its signature; each change to it is in ``CHANGELOG.md``; the API reference is generated
from the same ``__all__`` (``docs/_ext/ember_api.py``; ``tests/test_docs.py`` checks the site).

A change to the public API fails here until the snapshot is taken again on purpose
(``python -m tests.api.snapshot``) and the changelog's section for this version names what
changed: the public surface changes on purpose only, and users are told.
"""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

import ember
from tests.api.snapshot import CURRENT, NAMESPACES, Entry, read, surface

ROOT = Path(__file__).resolve().parents[1]
CHANGELOG = ROOT / "CHANGELOG.md"
RELEASES = ROOT / "tests" / "api"


def namespace_of(dotted: str, namespaces: Iterable[str] = NAMESPACES) -> str:
    """The namespace a snapshot name lives in (the longest of ``namespaces`` that prefixes it)."""
    return max((ns for ns in namespaces if dotted.startswith(ns + ".")), key=len)


def pinned_names() -> dict[str, set[str]]:
    """Each namespace's names, as the snapshot has them (members left out)."""
    names: dict[str, set[str]] = {ns: set() for ns in NAMESPACES}
    for dotted, _, _ in read(CURRENT):
        namespace = namespace_of(dotted)
        rest = dotted[len(namespace) + 1 :]
        if "." not in rest:
            names[namespace].add(rest)
    return names


PUBLIC = pinned_names()
EMBER, TRAIN = PUBLIC["ember"], PUBLIC["ember.train"]


def test_the_public_api_is_the_snapshot() -> None:
    """Every public name and member has the signature ``tests/api/current.txt`` pins."""
    pinned, now = set(read(CURRENT)), set(surface())
    gone = sorted(pinned - now)
    new = sorted(now - pinned)
    assert not gone and not new, (
        "the public API changed: if on purpose, run `python -m tests.api.snapshot` and say what "
        f"changed in CHANGELOG.md.\nno longer: {gone[:20]}\nnew: {new[:20]}"
    )


def release_of(path: Path) -> tuple[int, ...]:
    return tuple(int(part) for part in path.stem.split("."))


def last_release() -> Path:
    """The snapshot of the newest release before this version (``tests/api/X.Y.Z.txt``)."""
    version = tuple(int(part) for part in ember.__version__.split(".")[:3])
    older = [p for p in RELEASES.glob("*.*.*.txt") if release_of(p) < version]
    return max(older, key=release_of)


def leaves(rows: list[Entry]) -> dict[str, set[tuple[str, str]]]:
    """Rows keyed by name without their namespace (``Learner``, ``Learner.fork``), so that a
    name re-exported or moved to another namespace is the same name."""
    found: dict[str, set[tuple[str, str]]] = {}
    for dotted, kind, signature in rows:
        namespace = namespace_of(dotted, ALL_NS)
        found.setdefault(dotted[len(namespace) + 1 :], set()).add((kind, signature))
    return found


# namespaces of this release and of the releases before it (0.1.0 had packages under ember.train)
ALL_NS = {
    *NAMESPACES,
    "ember.errors",
    "ember.train.checkpoint",
    "ember.train.logger",
    "ember.train.lr_scheduler",
    "ember.train.metric",
    "ember.train.renderer",
    "ember.train.strategy",
}


def changelog_section(version: str) -> str:
    """The text of ``CHANGELOG.md``'s section for ``version``, after its ``## Unreleased``
    section (the changes made since, for the next release), if it has one."""
    text = CHANGELOG.read_text(encoding="utf-8")
    match = re.search(rf"^## \[{re.escape(version)}\].*?(?=^## \[|\Z)", text, re.M | re.S)
    assert match, f"CHANGELOG.md has no section ## [{version}]"
    unreleased = re.search(r"^## Unreleased.*?(?=^## |\Z)", text, re.M | re.S)
    return (unreleased.group(0) if unreleased else "") + match.group(0)


def mentioned(name: str, section: str, classes: set[str]) -> bool:
    """Whether the changelog ``section`` names ``name`` in backticks: a top-level name as
    itself; a member as ``Class.member``, as ``.member``, or through its class when the class
    itself came or went (``classes``)."""
    owner, _, member = name.partition(".")
    if not member:
        return f"`{name}`" in section
    return f"`{name}`" in section or f"`.{member}`" in section or owner in classes


def test_every_change_since_the_last_release_is_in_the_changelog() -> None:
    """Every name or member added, removed or changed since the last release's snapshot is
    named in this version's changelog section."""
    before, now = leaves(read(last_release())), leaves(read(CURRENT))
    changed = {name for name in before.keys() | now.keys() if before.get(name) != now.get(name)}
    came_or_went = {
        name for name in changed if "." not in name and (name in before) != (name in now)
    }
    section = changelog_section(ember.__version__)
    missing = sorted(name for name in changed if not mentioned(name, section, came_or_went))
    assert missing == [], (
        f"CHANGELOG.md's Unreleased and [{ember.__version__}] sections do not mention: {missing}"
    )


def test_every_moved_or_removed_name_is_in_the_changelog() -> None:
    """Each entry of the table of moved names (``ember/_moved.py``) is in the changelog with its
    old namespace on the same line."""
    from ember._moved import DEPRECATED, MOVED, REMOVED

    section = changelog_section(ember.__version__)
    missing = [
        f"{namespace}.{name}"
        for table in (MOVED, DEPRECATED, REMOVED)
        for namespace, names in table.items()
        for name in names
        if not any(
            f"`{namespace}`" in line and f"`{name}`" in line for line in section.splitlines()
        )
        and f"`{namespace}.{name}`" not in section
    ]
    assert missing == [], f"CHANGELOG.md does not list these moved or removed names: {missing}"


def test_the_version_has_one_source() -> None:
    """``ember.__version__``, the installed package's metadata and ``ember --version`` agree."""
    from importlib.metadata import version

    assert version("ember") == ember.__version__
    printed = subprocess.run(
        [sys.executable, "-m", "ember", "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert printed == f"ember {ember.__version__}"


DOCUMENTED_NAMES_TRAIN = {
    "TrainStep",
    "InferenceStep",
    "LearnerModel",
    "TrainOutput",
    "GradientsParams",
    "LrScheduler",
    "Learner",
    "SupervisedTraining",
    "LearningResult",
    "TrainingItem",
    "AsyncProcessorTraining",
    "FullEventProcessorTraining",
    "Metric",
    "Numeric",
    "LossMetric",
    "AccuracyMetric",
    "LearningRateMetric",
    "IterationSpeedMetric",
    "FileMetricLogger",
    "InMemoryMetricLogger",
    "CliMetricsRenderer",
    "default_renderer",
    "MetricEarlyStoppingStrategy",
    "StoppingCondition",
    "Interrupter",
    "SingleDevice",
    "SupervisedLearningStrategy",
    "RegressionOutput",
    "ClassificationOutput",
    "LearnerSummary",
}

OPTIONAL_EXTRAS = (
    *("tensorboard", "matplotlib", "torchmetrics", "sklearn", "rich", "mlflow"),
    *("jsonargparse", "yaml", "IPython", "optuna", "wandb", "pandas"),
)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_all_is_pinned(name: str) -> None:
    """Each public namespace's ``__all__`` is exactly the set written here, without repeats."""
    exported = importlib.import_module(name).__all__
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    assert set(exported) - PUBLIC[name] == set(), f"{name} exports names not pinned here"
    assert PUBLIC[name] - set(exported) == set(), f"{name} no longer exports pinned names"


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_every_name_is_importable_and_documented(name: str) -> None:
    """Every exported name exists; every class and function has a docstring of its own."""
    module = importlib.import_module(name)
    for public in PUBLIC[name]:
        value = getattr(module, public)  # AttributeError names the missing one
        if inspect.isclass(value) or inspect.isfunction(value):
            doc = (value.__doc__ or "").strip()
            # a dataclass without a docstring gets its signature as one: that is not documentation
            assert doc and not doc.startswith(f"{value.__name__}("), (
                f"{name}.{public}: no docstring"
            )


def test_a_name_exported_twice_is_the_same_object() -> None:
    """A name in several namespaces (``ember`` re-exports, ``Direction``...) is one object."""
    homes: dict[str, tuple[str, object]] = {}
    for name in sorted(PUBLIC):
        module = importlib.import_module(name)
        for public in sorted(PUBLIC[name]):
            value = getattr(module, public)
            first = homes.setdefault(public, (name, value))
            assert first[1] is value, f"{name}.{public} is not {first[0]}.{public}"


def test_top_level_names_come_from_the_packages() -> None:
    """``ember`` re-exports only: each of its names is exported by a namespace below it."""
    below = set().union(*(names for name, names in PUBLIC.items() if name != "ember"))
    errors = {"EmberError", "CheckpointError", "NonFiniteLossError"}  # ember's own, raised anywhere
    assert EMBER - below == errors | {"cli"}  # and the experiment's command line, ember.cli


def test_design_names_are_exported_from_ember_train() -> None:
    """Every name the design fixes for ember.train is importable from it and listed in __all__."""
    assert sorted(DOCUMENTED_NAMES_TRAIN - TRAIN) == []


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_import_starts_no_thread_and_loads_no_extra(name: str) -> None:
    """Importing a namespace starts no thread and imports no optional dependency (fast import)."""
    code = (
        f"import threading, sys, {name};"
        "print(threading.active_count());"
        f"print(sorted(m for m in {OPTIONAL_EXTRAS!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    ).stdout.split("\n")
    assert out[0] == "1", f"import {name} started a thread"
    assert out[1] == "[]", f"import {name} loaded optional extras"
