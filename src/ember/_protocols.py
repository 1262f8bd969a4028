"""Extension protocols: checking an implementation, and how a protocol grows without breaking one.

What a user implements is a ``typing.Protocol`` (``ember.extend``): a plain class with the
members is an implementation, and the builder checks it at the call (:func:`check_protocol`),
naming every member it lacks. A member with a default has a body, the default an implementation
that leaves it out gets: :func:`optional` marks one an implementation may leave out freely (a
renderer's ``on_warning``), :func:`added` one that came after a release (``docs/design.md``,
"Stability"). An implementation without an added member keeps working: :func:`with_defaults`
warns once that it should add it. Either way the run is handed an adapter in which the missing
members are the protocol's defaults::

    class EarlyStoppingStrategy(Protocol):
        def should_stop(self, epoch: int, query: MetricQuery) -> bool: ...

        @property
        @added("0.2.0")
        def reason(self) -> str | None:
            return None                     # what a 0.1.0 strategy's reason is
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from ember._moved import FORMER_CONTRACTS

__all__ = ["added", "added_in", "check_protocol", "optional", "with_defaults"]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

_DEFAULT = "__ember_default__"
_OPTIONAL = ""  # the mark of an optional member: it came with its protocol, not after


def added(version: str) -> Callable[[F], F]:
    """Mark a protocol member as added in ``version``: its body is its default, and an
    implementation without it is warned of (once)."""

    def mark(member: F) -> F:
        setattr(member, _DEFAULT, version)
        return member

    return mark


def optional(member: F) -> F:
    """Mark a protocol member as optional: its body is its default (no warning)."""
    setattr(member, _DEFAULT, _OPTIONAL)
    return member


def _mark(member: object) -> str | None:
    function = member.fget if isinstance(member, property) else member
    return getattr(function, _DEFAULT, None)


def added_in(member: object) -> str | None:
    """The version a protocol member was added in (``@added``), or None: it is required or
    optional from the start."""
    return _mark(member) or None


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
        if _mark(member) is None and _lacks(value, name, inspect.isfunction(member))
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
    """``value`` checked against ``protocol``; if it lacks members that have defaults, an
    adapter that forwards to it and takes the protocol's defaults for those (members added
    after a release are warned of once per class, with the members to add)."""
    check_protocol(value, protocol, what)
    declared = _declared(protocol)
    missing = sorted(
        name
        for name, member in declared.items()
        if _mark(member) is not None and _lacks(value, name, inspect.isfunction(member))
    )
    if not missing:
        return value
    late = [name for name in missing if added_in(declared[name]) is not None]
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
    adapter: T = _adapter(value, protocol, declared, missing)
    return adapter


def _adapter(value: Any, protocol: type, declared: dict[str, object], missing: list[str]) -> Any:
    """An object of a new class whose members forward to ``value``, except ``missing``: those
    are the protocol's own (their defaults)."""
    doc = f"{type(value).__name__} as a {protocol.__name__}, with the defaults of {missing}"
    body: dict[str, object] = {"__slots__": ("wrapped",), "__doc__": doc}
    for name, member in declared.items():
        if name in missing:
            body[name] = member
        elif inspect.isfunction(member):
            body[name] = _forward_method(name)
        else:
            body[name] = property(_forward_attribute(name))
    cls = type(f"{type(value).__name__}WithDefaults", (), body)
    adapter = cls()
    adapter.wrapped = value
    return adapter


def _forward_method(name: str) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.wrapped, name)(*args, **kwargs)

    forward.__name__ = name
    return forward


def _forward_attribute(name: str) -> Callable[[Any], Any]:
    def forward(self: Any) -> Any:
        return getattr(self.wrapped, name)

    return forward
