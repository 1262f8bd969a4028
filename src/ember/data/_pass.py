"""A loader's position: the passes it started, the batches its current pass yielded, and the
progress a pass reports.

``PassTracker`` is the position every ember loader keeps: ``epoch`` (passes started) and
``batches_consumed`` (batches yielded by the current pass), the resume rule of a restored state,
and close/context-manager handling; ``PassIterator`` counts what its pass yields and reports
its ``Progress``; ``check_state`` refuses a state saved by another loader.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Self, TypeVar

from ember._checks import check_int
from ember._closing import ClosesOnExit
from ember._errors import DataLoaderError
from ember._frozen import set_field

__all__ = ["PassIterator", "PassTracker", "Progress", "check_state"]

BatchT = TypeVar("BatchT")

_ENDED = object()  # the token of an iterator whose pass ended with an error


@dataclass(frozen=True, slots=True, init=False)
class Progress:
    """How far a pass has got: items consumed so far out of the pass's total.

    ``items_total`` is None while the total is unknown: a streaming pass learns it with its last
    batch, whose progress has ``items_total == items_processed``.
    """

    items_processed: int
    items_total: int | None
    unit: str | None = "items"

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self, items_processed: int, items_total: int | None, unit: str | None = "items"
    ) -> None:
        set_field(self, "items_processed", items_processed)
        set_field(self, "items_total", items_total)
        set_field(self, "unit", unit)

    @property
    def is_completed(self) -> bool:
        """Whether every item of the pass has been consumed (True exactly on its last batch)."""
        return self.items_processed == self.items_total


def check_state(state: Mapping[str, Any], own: Mapping[str, Any], identity: Sequence[str]) -> None:
    """Raise ValueError unless ``state`` has every field of ``own`` and agrees on ``identity``.

    The message names the field and both values, so restoring into the wrong loader (another
    dataset length, batch size or seed) says what differs.
    """
    for field in own:
        if field not in state:
            raise ValueError(f"loader state has no {field!r} field")
    for field in identity:
        saved = list(state[field]) if isinstance(state[field], tuple) else state[field]
        if saved != own[field]:
            raise ValueError(
                f"cannot load loader state: {field} is {saved!r} in the state but "
                f"{own[field]!r} in this loader"
            )


class PassTracker(ClosesOnExit):
    """The position every ember loader keeps, and the rules that move it.

    ``epoch`` counts the passes started (each ``iter()`` starts the next one) and
    ``batches_consumed`` the batches yielded by the current pass. Starting a pass ends the
    previous one: its iterator stops. After ``_load_position`` of an unfinished pass, the next
    ``iter()`` resumes that pass at ``batches_consumed`` instead of starting a new one.
    """

    def __init__(self) -> None:
        self._epoch = 0
        self._consumed = 0
        self._resume = False  # the next pass continues a restored, unfinished one
        self._pass: object | None = None  # identifies the live pass; other iterators stop
        self._closed = False

    @abstractmethod
    def __len__(self) -> int:
        """The number of batches of a pass."""

    @abstractmethod
    def num_items(self) -> int | None:
        """The number of items of a pass, None when unknown."""

    @abstractmethod
    def _items_after(self, batches: int) -> int:
        """The items consumed once ``batches`` batches of a pass have been."""

    def _items_total(self) -> int | None:
        """The ``items_total`` of the current pass's progress."""
        return self.num_items()

    def _batches_per_pass(self) -> int | None:
        """The batches of a pass, None when unknown (bounds a restored ``batches_consumed``)."""
        return len(self)

    def _begin_pass(self) -> object:
        """Advance the position for a new pass (or the resumed one) and return its token."""
        if self._closed:
            raise DataLoaderError(f"cannot iterate a closed {type(self).__name__}")
        if self._resume:
            self._resume = False
        else:
            self._epoch += 1
            self._consumed = 0
        self._pass = token = object()
        return token

    def _unfinished(self) -> bool:
        return self._epoch > 0 and self._consumed < len(self)

    def _position(self) -> dict[str, int]:
        return {"epoch": self._epoch, "batches_consumed": self._consumed}

    def _load_position(self, state: Mapping[str, Any]) -> None:
        """Take the position of ``state`` (already checked by ``check_state``)."""
        epoch = check_int("epoch", state["epoch"], minimum=0)
        consumed = check_int("batches_consumed", state["batches_consumed"], minimum=0)
        limit = self._batches_per_pass()
        if (limit is not None and consumed > limit) or (epoch == 0 and consumed > 0):
            bound = "" if limit is None else f"<= {limit} (the batches of a pass) and "
            raise ValueError(
                f"batches_consumed must be {bound}0 before the first epoch, got {consumed} at "
                f"epoch {epoch}"
            )
        self._epoch, self._consumed = epoch, consumed
        self._resume = self._unfinished()
        self._pass = None

    def close(self) -> None:
        """Mark the loader closed: its live iterator stops and it cannot be iterated again."""
        self._closed = True
        self._pass = None


class PassIterator(Generic[BatchT]):
    """One pass of a ``PassTracker``: yields ``batches``, counts them, reports progress.

    It stops when its loader starts another pass or is closed, and after an error (the position
    still points at the failed batch, so a restored state retries it).
    """

    __slots__ = ("_batches", "_done", "_loader", "_token")

    def __init__(self, loader: PassTracker, token: object, batches: Iterator[BatchT]) -> None:
        self._loader = loader
        self._token = token
        self._batches = batches
        self._done = loader._consumed  # a resumed pass counts the skipped batches as done

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> BatchT:
        loader = self._loader
        if loader._pass is not self._token:
            self._batches = iter(())  # drop the source (and the threads' or processes' batches)
            raise StopIteration
        try:
            batch = next(self._batches)
        except BaseException as error:
            if not isinstance(error, StopIteration):
                self._token = _ENDED
            raise
        self._done += 1
        loader._consumed = self._done
        return batch

    def progress(self) -> Progress:
        return Progress(self._loader._items_after(self._done), self._loader._items_total())
