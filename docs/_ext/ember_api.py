"""The API reference, generated from the public namespaces' ``__all__`` and the docstrings.

``.. ember-namespace:: ember.train`` (one per page of ``docs/api/``) writes the namespace's
docstring, a table of every name in its ``__all__`` with the first sentence of its docstring, and
the full documentation of each name that lives there. A name exported by several namespaces
(``ember`` re-exports, ``ember.extend`` shares the protocols) is documented once, in its home:
the first namespace of ``HOMES`` that exports it; the other tables link to it.

Docstrings cite names briefly (``:class:`Learner``` in ``ember.data``); a reference Sphinx cannot
resolve in the current module is resolved here against the public names, so that every
reference to ember's API links and a wrong one fails the strict build.
"""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from types import ModuleType
from typing import Any

from docutils import nodes
from sphinx.addnodes import pending_xref
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.pycode import ModuleAnalyzer
from sphinx.util.docutils import SphinxDirective

NAMESPACES = (
    "ember",
    "ember.data",
    "ember.train",
    "ember.extend",
    "ember.distributed",
    "ember.runs",
)
"""The public namespaces, each with a page ``docs/api/NAMESPACE.rst`` (as ``tests/api/snapshot.py``
has them: ``tests/test_docs.py`` checks the pages against its list)."""

HOMES = (*NAMESPACES[1:], "ember")
"""Where a name shared by several namespaces is documented: the first that exports it."""


def public(namespace: str) -> list[str]:
    return sorted(importlib.import_module(namespace).__all__)


def home_of(name: str) -> str:
    """The namespace whose page documents ``name`` in full."""
    return next(ns for ns in HOMES if name in public(ns))


def alias_doc(name: str, value: object) -> str:
    """The docstring written under a type alias (``DeviceLike = str | torch.device``), found in
    the ember module that assigns it: an alias object has no ``__doc__`` of its own."""
    for module in list(sys.modules.values()):
        if not isinstance(module, ModuleType) or not module.__name__.startswith("ember."):
            continue
        if getattr(module, name, None) is not value:
            continue
        docs = ModuleAnalyzer.for_module(module.__name__).find_attr_docs()
        if ("", name) in docs:
            return "\n".join(docs["", name]).strip()
    return ""


def summary(name: str, value: object) -> str:
    """The first sentence of the docstring of ``value``, its references as plain code: the
    table is read out of the class's context, where ``:meth:`remove``` means nothing."""
    doc = alias_doc(name, value) if role(value) == "data" else inspect.getdoc(value)
    paragraph = (doc or "").strip().split("\n\n")[0].replace("\n", " ")
    sentence = re.split(r"(?<=[.!?])\s+(?=[A-Z])", paragraph)[0]
    return re.sub(r":[\w:]+:`~?([^`]+)`", r"``\1``", sentence)


def is_ember(cls: type) -> bool:
    return cls.__module__.split(".")[0] == "ember"


def role(value: object) -> str:
    if inspect.isclass(value):
        return "class"
    return "func" if inspect.isroutine(value) else "data"  # a ``Callable[...]`` alias is data


def documentation(namespace: str, name: str, value: object) -> list[str]:
    """The reST that documents ``namespace.name`` in full."""
    target = f"{namespace}.{name}"
    if inspect.isclass(value):
        # ember's members, inherited ones too (a private base's ``binary`` is public on
        # ``PrecisionMetric``), not torch's, typing's or object's: as tests/api/snapshot.py does
        foreign = sorted({c.__name__ for c in value.__mro__ if not is_ember(c)})
        options = [
            ":members:",
            ":undoc-members:",
            f":inherited-members: {', '.join(foreign)}",
            ":show-inheritance:",
        ]
        return [f".. autoclass:: {target}", *(f"   {o}" for o in options), ""]
    if role(value) == "func":
        return [f".. autofunction:: {target}", ""]
    doc = alias_doc(name, value).splitlines() or [""]
    return [
        f".. py:data:: {name}",
        f"   :module: {namespace}",
        f"   :value: {value!r}",
        "",
        *(f"   {line}" for line in doc),
        "",
    ]


class NamespaceDirective(SphinxDirective):
    """``{ember-namespace} NAME``: the reference page of one public namespace."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        namespace = self.arguments[0]
        if namespace not in NAMESPACES:
            raise self.error(f"{namespace!r} is not a public namespace: one of {NAMESPACES}")
        module = importlib.import_module(namespace)
        names = public(namespace)
        lines = [f".. automodule:: {namespace}", "", ".. list-table::", "   :widths: 35 65", ""]
        for name in names:
            value = getattr(module, name)
            if not summary(name, value):
                raise self.error(f"{namespace}.{name} has no docstring: the reference needs one")
            lines += [
                f"   * - :py:{role(value)}:`~{home_of(name)}.{name}`",
                f"     - {summary(name, value)}",
            ]
        lines.append("")
        for name in names:
            if home_of(name) == namespace:
                lines += documentation(namespace, name, getattr(module, name))
        return self.parse_text_to_nodes("\n".join(lines))


def defined_in_ember(name: str) -> bool:
    """Whether a module of ember has ``name`` at its top level."""
    return any(
        module.__name__.startswith("ember.") and hasattr(module, name)
        for module in list(sys.modules.values())
        if isinstance(module, ModuleType)
    )


def resolve_public(
    app: Sphinx, env: BuildEnvironment, node: pending_xref, contnode: nodes.TextElement
) -> Any:
    """Resolve a Python reference that names a public name briefly (``Learner``,
    ``SupervisedTraining.launch``) against the name's home. One that names something private of
    ember's (``AccuracyInput``, a metric's input type) stays plain code: there is no page to link
    to. ``None`` leaves it unresolved: a name ember does not have fails the strict build."""
    if node.get("refdomain") != "py":
        return None
    target: str = node["reftarget"]
    first = target.partition(".")[0]
    if not first or first.startswith("_") or first == "ember":
        return None
    homes = [ns for ns in HOMES if first in public(ns)]
    if not homes:
        return contnode if defined_in_ember(first) else None
    full = f"{homes[0]}.{target}"
    domain = env.get_domain("py")
    return domain.resolve_xref(
        env, node["refdoc"], app.builder, node["reftype"], full, node, contnode
    )


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("ember-namespace", NamespaceDirective)
    app.connect("missing-reference", resolve_public)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
