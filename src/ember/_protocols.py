"""Extension protocols: checking an implementation, and how a protocol grows without breaking one.

What a user implements is a ``typing.Protocol`` (``ember.extend``): a plain class with the
members is an implementation, and the builder checks it at the call (:func:`check_protocol`),
naming every member it lacks. A member added to a protocol after a release is marked
:func:`added` and has a body, the default an older implementation gets (``docs/design.md``,
"Stability"): such an implementation keeps working, and :func:`with_defaults` warns once that it
should add the member. Members an implementation may always leave out are not on the protocol
(a type checker would require them) but on a class of defaults: ``Renderer``'s no-op methods for
a renderer's optional ones. Whoever calls a member that has a default reads it through
:func:`member`, which gives the implementation's own or the default; the object itself is never
wrapped, so everything else it is (another protocol's members, its identity) stays as it is::

    class EarlyStoppingStrategy(Protocol):
        def should_stop(self, epoch: int, query: MetricQuery) -> bool: ...

        @property
        @added("0.2.0")
        def reason(self) -> str | None:
            return None                     # what a 0.1.0 strategy's reason is

    reason = member(strategy, EarlyStoppingStrategy, "reason")
"""

from __future__ import annotations

import inspect
import types
import warnings
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ember._moved import FORMER_CONTRACTS

__all__ = ["added", "added_in", "check_protocol", "member", "with_defaults"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_ADDED = "__ember_added__"


def added(version: str) -> Callable[[F], F]:
    """Mark a protocol member as added in ``version``: its body is its default, and an
    implementation without it is warned of (once)."""

    def mark(member: F) -> F:
        setattr(member, _ADDED, version)
        return member

    return mark


def added_in(member: object) -> str | None:
    """The version a protocol member was added in (``@added``), or None: it is required."""
    function = member.fget if isinstance(member, property) else member
    return getattr(function, _ADDED, None)


def _declared(protocol: type) -> dict[str, object]:
    """The public members a Protocol declares, by name, as written in its class bodies."""
    members: dict[str, object] = {}
    for base in reversed(protocol.__mro__):
        if base in (object, Protocol, Generic) or not getattr(base, "_is_protocol", False):
            continue
        for name in getattr(base, "__annotations__", {}):
            if not name.startswith("_"):
                members.setdefault(name, None)
        members.update((n, v) for n, v in vars(base).items() if not n.startswith("_"))
    return members


def _lacks(value: Any, name: str, method: bool) -> bool:
    return not hasattr(value, name) or (method and not callable(getattr(value, name)))


def check_protocol(value: Any, protocol: type, what: str) -> None:
    """Raise TypeError naming every required member of ``protocol`` that ``value`` lacks.

    ``what`` names the argument (``"renderer"``); the message points to the protocol's
    documentation in :mod:`ember.extend`. Members added after a release (:func:`added`) have
    defaults: see :func:`with_defaults`.
    """
    missing = [
        name
        for name, member in _declared(protocol).items()
        if added_in(member) is None and _lacks(value, name, inspect.isfunction(member))
    ]
    if missing:
        raise TypeError(
            f"{what} {type(value).__name__} lacks {', '.join(missing)}: it must implement "
            f"ember.extend.{protocol.__name__}{_former(value, protocol)}"
        )


def _former(value: Any, protocol: type) -> str:
    """What to say when ``value`` implements the 0.1.0 contract ``protocol`` replaced."""
    former = FORMER_CONTRACTS.get(protocol.__name__, ())
    if not former or not all(hasattr(value, name) for name in former):
        return ""
    members = ", ".join(name for name in _declared(protocol))
    return (
        f" (it implements ember 0.1.0's contract, with {', '.join(former)}; since 0.2.0 the "
        f"members are {members}: see CHANGELOG.md and help(ember.extend.{protocol.__name__}))"
    )


_warned: set[tuple[type, type]] = set()


def with_defaults(value: T, protocol: type[Any], what: str) -> T:
    """``value`` checked against ``protocol`` (:func:`check_protocol`); when it lacks members
    added after a release, one ``DeprecationWarning`` per class names them. The value itself is
    returned: its missing members are read with :func:`member`."""
    check_protocol(value, protocol, what)
    declared = _declared(protocol)
    late = sorted(
        name
        for name, member in declared.items()
        if added_in(member) is not None and _lacks(value, name, inspect.isfunction(member))
    )
    if late and (type(value), protocol) not in _warned:
        _warned.add((type(value), protocol))
        versions = sorted({str(added_in(declared[name])) for name in late})
        warnings.warn(
            f"{what} {type(value).__name__} implements an older ember.extend."
            f"{protocol.__name__}: it lacks {', '.join(late)} (added in "
            f"{', '.join(versions)}), so their defaults are used; add them (see "
            f"help(ember.extend.{protocol.__name__}))",
            DeprecationWarning,
            stacklevel=3,
        )
    return value


def member(value: Any, defaults: type, name: str) -> Any:
    """``value``'s member ``name``, or, when it has none, the default ``defaults`` declares (an
    ``@added`` protocol member, or a class of defaults' method): bound to ``value``, or a default
    property's value. Resolve a method once where it is called per batch."""
    if hasattr(value, name):
        return getattr(value, name)
    default = inspect.getattr_static(defaults, name)
    if isinstance(default, property):
        assert default.fget is not None
        return default.fget(value)
    return types.MethodType(default, value)
