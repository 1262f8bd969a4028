"""0.1.0's names, imported where 0.1.0 had them (``tests/api/0.1.0.txt``): each works, moved
ones with a ``DeprecationWarning`` naming the import to write, and the removed ones say what to
use instead; the names deprecated since, still working with a warning. This is the one test
module that imports the old spellings on purpose."""

from __future__ import annotations

import importlib
import warnings
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from ember import _moved
from tests.api.snapshot import read

OLD_RELEASE = Path(__file__).resolve().parent / "api" / "0.1.0.txt"
OLD_NAMESPACES = (
    "ember",
    "ember.data",
    "ember.distributed",
    "ember.errors",
    "ember.train",
    "ember.train.checkpoint",
    "ember.train.logger",
    "ember.train.lr_scheduler",
    "ember.train.metric",
    "ember.train.renderer",
    "ember.train.strategy",
)


def old_names() -> Iterator[tuple[str, str]]:
    """``(namespace, name)`` for every name 0.1.0's namespaces exported."""
    for dotted, _, _ in read(OLD_RELEASE):
        namespace = max((ns for ns in OLD_NAMESPACES if dotted.startswith(ns + ".")), key=len)
        name = dotted[len(namespace) + 1 :]
        if "." not in name:
            yield namespace, name


OLD = sorted(set(old_names()))


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the first access of every name (the table warns once per name)."""
    monkeypatch.setattr(_moved, "_warned", set())


def outcome(namespace: str, name: str) -> str:
    """How ``from namespace import name`` fares: "works", "warns" or "refused" (checking what
    it says on the way), or "silent" for a bare failure."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            scope: dict[str, object] = {}
            exec(f"from {namespace} import {name}", scope)
        except ImportError as error:
            if "removed in ember 0.2.0: " not in str(error) or f"{namespace}.{name}" not in str(
                error
            ):
                return "silent"
            return "refused"
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    if not ours:
        return "works"
    assert len(ours) == 1, f"{namespace}.{name}: {[str(w.message) for w in ours]}"
    return "warns"


def test_every_old_name_works_or_names_its_replacement() -> None:
    """All 271 names: each imports (maybe with a warning) or is refused with its replacement;
    none fails with a bare error (``ember.train.GradientsAccumulator``, deprecated in 0.3.0,
    warns)."""
    counts = Counter(outcome(namespace, name) for namespace, name in OLD)
    assert len(OLD) == 271
    assert counts["silent"] == 0
    assert counts == {"works": 108, "warns": 120, "refused": 43}


@pytest.mark.parametrize(
    ("namespace", "name", "home"),
    sorted((ns, name, home) for ns, names in _moved.MOVED.items() for name, home in names.items()),
)
def test_a_moved_name_is_its_new_homes_object_and_says_where(
    namespace: str, name: str, home: str
) -> None:
    """A moved name is the same object as at its new home; the warning names the import line
    and points at the user's line."""
    module = importlib.import_module(namespace)
    with pytest.warns(DeprecationWarning, match=f"write `from {home} import {name}`") as caught:
        value = getattr(module, name)
    assert value is getattr(importlib.import_module(home), name)
    assert caught[0].filename == __file__


def test_a_moved_name_warns_once() -> None:
    """The second import of a moved name is silent: one warning per name and process."""
    import ember.train

    with pytest.warns(DeprecationWarning, match="ember.train.MeanMetric moved"):
        first = ember.train.MeanMetric
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ember.train.MeanMetric is first


@pytest.mark.parametrize(
    ("namespace", "name"),
    sorted((ns, name) for ns, names in _moved.REMOVED.items() for name in names),
)
def test_a_removed_name_says_what_to_use_instead(namespace: str, name: str) -> None:
    """Both spellings of a removed name raise ImportError with the table's advice."""
    advice = _moved.REMOVED[namespace][name]
    with pytest.raises(ImportError, match=r"removed in ember 0\.2\.0") as raised:
        exec(f"from {namespace} import {name}", {})
    assert advice in str(raised.value)
    with pytest.raises(ImportError, match=r"removed in ember 0\.2\.0"):
        getattr(importlib.import_module(namespace), name)


def test_an_unknown_name_is_a_plain_attribute_error() -> None:
    """A name that never existed is an AttributeError, as for any module (hasattr works)."""
    import ember.train

    assert not hasattr(ember.train, "NoSuchName")
    with pytest.raises(ImportError, match="cannot import name 'NoSuchName'"):
        exec("from ember.train.metric import NoSuchName", {})


def test_the_ports_of_0_1_0_import_unchanged() -> None:
    """Import blocks as 0.1.0 users wrote them (pytorch/examples ports, the custom renderer
    example) run unchanged, each moved name warning once."""
    block = """
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.errors import CheckpointError, NonFiniteLossError
from ember.train import (
    Learner, LearnerSummary, LearningResult, LossInput, LossMetric, MeanMetric, MetricDefinition,
    MetricState, Split, SupervisedTraining,
)
from ember.train.checkpoint import Delete, KeepLastNCheckpoints, Save
from ember.train.logger import CsvMetricLogger
from ember.train.lr_scheduler import CosineAnnealingLr, TorchLrScheduler
from ember.train.metric import AccuracyMetric, Metric, Numeric
from ember.train.renderer import CliMetricsRenderer
from ember.train.strategy import DistributedDataParallel, SingleDevice
"""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scope: dict[str, object] = {}
        exec(block, scope)
    moved = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(moved) == 18
    assert all("write `from ember" in message for message in moved)
    assert scope["Save"] is importlib.import_module("ember.extend").Save


@pytest.mark.parametrize(
    ("namespace", "name"),
    sorted((ns, name) for ns, names in _moved.DEPRECATED.items() for name in names),
)
def test_a_deprecated_name_is_the_same_object_and_says_what_to_use_instead(
    namespace: str, name: str
) -> None:
    """A deprecated name still gives its object, with a warning saying since when, the release
    it goes in and what to write instead, pointing at the user's line."""
    entry = _moved.DEPRECATED[namespace][name]
    module = importlib.import_module(namespace)
    with pytest.warns(DeprecationWarning, match=f"deprecated since {entry.since}") as caught:
        value = getattr(module, name)
    home, _, attribute = entry.where.rpartition(".")
    assert value is getattr(importlib.import_module(home), attribute)
    assert entry.instead in str(caught[0].message)
    assert caught[0].filename == __file__


def test_the_names_deprecated_in_0_3_0_go_in_0_4_0_and_are_not_exported() -> None:
    """``GradientsAccumulator`` and ``AsyncCheckpointer`` (no use of their own for users: the
    loop accumulates, the run's checkpointer writes on its own thread) leave ember.train's
    ``__all__`` and still import from it, with a warning naming what to use."""
    import ember.train

    for name, advice in [
        ("GradientsAccumulator", "grads_accumulation(n)"),
        ("AsyncCheckpointer", "LearningCheckpointer(directory, strategy)"),
    ]:
        assert name not in ember.train.__all__
        deprecated = f"ember.train.{name} is deprecated since 0.3.0 and goes in 0.4.0"
        with pytest.warns(DeprecationWarning, match=deprecated) as caught:
            exec(f"from ember.train import {name}", {})
        assert advice in str(caught[0].message)
