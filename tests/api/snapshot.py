"""Take a snapshot of ember's public API: one line per public name and per public member.

Each line is ``dotted.name<TAB>kind<TAB>signature`` as ``inspect.signature`` prints it (a class's
is its constructor's; a property's, its getter's; an enum member's, its value). The public names
are each namespace's ``__all__``; the members of a class are those ember defines on it or on an
ember base (inherited ``torch``/``object`` members are not ember's promise).

``python -m tests.api.snapshot`` rewrites ``tests/api/current.txt`` from the installed ember (run
it after changing the API on purpose, and say what changed in ``CHANGELOG.md``);
``--namespaces a,b --output F`` takes another list, e.g. from an older checkout on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["CURRENT", "NAMESPACES", "Entry", "entries", "read", "surface"]

NAMESPACES = (
    "ember",
    "ember.data",
    "ember.train",
    "ember.extend",
    "ember.distributed",
    "ember.runs",
)
"""The public namespaces of this release (``docs/api/`` has a reference page for each)."""

CURRENT = Path(__file__).resolve().parent / "current.txt"
"""The snapshot of the API as it is now."""

Entry = tuple[str, str, str]
"""``(dotted name, kind, signature)``."""


def _signature(value: Any) -> str:
    try:
        text = str(inspect.signature(value))
    except (TypeError, ValueError):  # a builtin or a class without an introspectable __init__
        return "(...)"
    return re.sub(r" at 0x[0-9a-f]+", "", text)  # a default's repr names its address


def _is_ember(owner: type) -> bool:
    return owner.__module__.split(".")[0] == "ember"


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public members ember defines on ``cls`` or on an ember base, by name."""
    seen: set[str] = set()
    for owner in cls.__mro__:
        if not _is_ember(owner):
            continue
        for name, value in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            seen.add(name)
            yield name, value


def _member(qualified: str, value: Any) -> Entry:
    if isinstance(value, property):
        return (qualified, "property", _signature(value.fget))
    if isinstance(value, classmethod | staticmethod):
        return (qualified, type(value).__name__, _signature(value.__func__))
    if inspect.isfunction(value):
        return (qualified, "method", _signature(value))
    if isinstance(value, enum.Enum):
        return (qualified, "member", repr(value.value))
    return (qualified, "attribute", type(value).__name__)


def entries(namespace: str) -> Iterator[Entry]:
    """Every public name of ``namespace`` and every public member of its classes."""
    module = importlib.import_module(namespace)
    for name in sorted(module.__all__):
        value = getattr(module, name)
        qualified = f"{namespace}.{name}"
        if inspect.isclass(value):
            kind = "protocol" if getattr(value, "_is_protocol", False) else "class"
            if issubclass(value, enum.Enum):
                kind = "enum"
            yield (qualified, kind, _signature(value) if kind == "class" else "")
            for member, attribute in sorted(_members(value)):
                yield _member(f"{qualified}.{member}", attribute)
        elif callable(value):
            yield (qualified, "function", _signature(value))
        else:
            yield (qualified, "value", repr(value))


def surface(namespaces: Sequence[str] = NAMESPACES) -> list[Entry]:
    """The whole public API of ``namespaces``, sorted."""
    return sorted(entry for namespace in namespaces for entry in entries(namespace))


def read(path: Path) -> list[Entry]:
    """A snapshot file read back."""
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    return [(row[0], row[1], row[2]) for row in rows]


def write(path: Path, rows: Sequence[Entry], header: str) -> None:
    """Write ``rows`` as a snapshot file, with a comment line saying what it is."""
    text = "".join(f"{name}\t{kind}\t{signature}\n" for name, kind, signature in rows)
    path.write_text(f"# {header}\n{text}", encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tests.api.snapshot``: write the snapshot of the installed ember."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", default=",".join(NAMESPACES))
    parser.add_argument("--output", type=Path, default=CURRENT)
    args = parser.parse_args(argv)
    import ember

    rows = surface(args.namespaces.split(","))
    write(args.output, rows, f"ember {ember.__version__}: public API (tests/api/snapshot.py)")


if __name__ == "__main__":
    main()
