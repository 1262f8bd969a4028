"""The callbacks a run calls, resolved once: for each point, the methods the callbacks have.

The loop asks for a point's methods when the run starts, not at every call: a run whose
callbacks have no per-step method (or that has no callback) tests an empty tuple per step and
calls nothing. A method a callback inherits from :class:`~ember.train.Callback` (or
:class:`~ember.train.Hooks`) unchanged does nothing, so it is not called at all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ember.train._callbacks.base import CALLBACK_POINTS, Callback
from ember.train._hooks import HOOKS, Hooks

__all__ = [
    "CalledCallbacks",
    "Methods",
    "callback_name",
    "check_callback",
    "stateful_callbacks",
]

Methods = tuple[tuple[object, Callable[..., Any]], ...]
"""A point's callbacks and their bound methods, in the order the callbacks were given."""

_NO_OPS = frozenset(
    getattr(base, point)
    for base in (Callback, Hooks)
    for point in CALLBACK_POINTS
    if hasattr(base, point)
)


def callback_name(callback: object) -> str:
    """How an error names ``callback``: its class (and ``repr`` when the class defines one)."""
    kind = type(callback)
    if kind.__repr__ is not object.__repr__:
        return repr(callback)
    return kind.__qualname__


class CalledCallbacks:
    """The methods of ``callbacks`` for each point (see the module doc); :meth:`call` runs a
    point's methods, an exception noted with the callback and the point."""

    __slots__ = ("_points", "after_step", "batch_end", "batch_start", "before_step", "callbacks")

    def __init__(self, callbacks: Iterable[object], model: object | None = None) -> None:
        self.callbacks = tuple(callbacks)
        # a model's own hooks come first, and only the four of 0.2.0 (``_hooks.py``)
        self._points = {
            point: _methods((model,) if model is not None and point in HOOKS else (), point)
            + _methods(self.callbacks, point)
            for point in CALLBACK_POINTS
        }
        self.batch_start = self._points["on_train_batch_start"]
        self.before_step = self._points["on_before_optimizer_step"]
        self.after_step = self._points["on_after_optimizer_step"]
        self.batch_end = self._points["on_train_batch_end"]

    def methods(self, point: str) -> Methods:
        """The methods called at ``point``."""
        return self._points[point]

    def call(self, point: str, *args: Any) -> None:
        """Call ``point``'s methods with ``args``, in order."""
        methods = self._points[point]
        if methods:
            run_methods(methods, point, args)

    def __bool__(self) -> bool:
        return any(self._points.values())


def run_methods(methods: Methods, point: str, args: tuple[Any, ...]) -> None:
    """Call each of ``methods`` with ``args``; an exception leaves with a note naming the
    callback and ``point`` (it is the run's error)."""
    for callback, method in methods:
        try:
            method(*args)
        except Exception as error:
            error.add_note(f"ember: raised by the callback {callback_name(callback)} in {point}")
            raise


def _methods(callbacks: tuple[object, ...], point: str) -> Methods:
    found = []
    for callback in callbacks:
        method = getattr(callback, point, None)
        if not callable(method) or getattr(type(callback), point, None) in _NO_OPS:
            continue
        found.append((callback, method))
    return tuple(found)


def stateful_callbacks(callbacks: Iterable[object]) -> dict[str, Any]:
    """The callbacks with ``state_dict()`` and ``load_state_dict()``, by the name their state
    has in checkpoints: the class's name, ``Name#2`` for its second callback, and so on."""
    named: dict[str, Any] = {}
    for callback in callbacks:
        if not (
            callable(getattr(callback, "state_dict", None))
            and callable(getattr(callback, "load_state_dict", None))
        ):
            continue
        base = type(callback).__qualname__
        name, count = base, 1
        while name in named:
            count += 1
            name = f"{base}#{count}"
        named[name] = callback
    return named


def check_callback(callback: object) -> None:
    """Refuse, at ``with_callbacks``, an object that is no callback (a class instead of an
    instance, no point's method) or has half of the state protocol, naming the fix."""
    if isinstance(callback, type):
        raise TypeError(
            f"with_callbacks takes callback objects, got the class {callback.__qualname__}: "
            f"write {callback.__qualname__}(...)"
        )
    if not any(callable(getattr(callback, point, None)) for point in CALLBACK_POINTS):
        raise TypeError(
            f"with_callbacks: {type(callback).__name__} has no method of a callback point "
            f"({', '.join(CALLBACK_POINTS)}); subclass ember.train.Callback and override the "
            "points you need"
        )
    saves = callable(getattr(callback, "state_dict", None))
    loads = callable(getattr(callback, "load_state_dict", None))
    if saves != loads:
        has, lacks = (
            ("state_dict", "load_state_dict") if saves else ("load_state_dict", "state_dict")
        )
        raise TypeError(
            f"the callback {callback_name(callback)} has {has}() but no {lacks}(): a callback's "
            "state joins checkpoints with both (or neither)"
        )
