"""``LimitedLoader``: the first N batches of every pass of a loader (the debugging modes).

``SupervisedTraining.limit_batches`` and ``fast_dev_run`` train and validate on the first
batches of each pass, as Lightning's ``limit_train_batches`` does: a pass of the limited loader
is the first ``batches`` batches of a pass of the loader it wraps (shuffled as that pass is),
then the wrapped pass is left and the next ``iter()`` starts the wrapped loader's next one. The
state (``state_dict``) is the wrapped loader's, plus whether its pass under way was cut, so a
resumed run goes on with the batches an uninterrupted one would have had.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Generic, TypeVar

import torch

from ember._checks import check_int
from ember._device import DeviceLike
from ember.data._loader import DataLoader, DataLoaderIterator
from ember.data._pass import Progress

__all__ = ["LIMITED_KIND", "LimitedLoader"]

BatchT = TypeVar("BatchT")

LIMITED_KIND = "ember.data._limited"


class LimitedLoader(Generic[BatchT]):
    """The first ``batches`` batches of each pass of ``loader`` (see the module doc)."""

    def __init__(self, loader: DataLoader[BatchT], batches: int) -> None:
        self.loader = loader
        self.batches = check_int("batches", batches, minimum=1)
        self._cut = False  # the wrapped loader's pass under way was left at the limit

    def __iter__(self) -> DataLoaderIterator[BatchT]:
        loader = self.loader
        if self._cut:  # a restored position inside a cut pass: that pass is over for us
            iter(loader)  # (the wrapped loader resumes it here; starting another ends it)
            self._cut = False
        return _LimitedPass(self, iter(loader), self.num_items())

    def __len__(self) -> int:
        return min(self.batches, len(self.loader))

    def num_items(self) -> int | None:
        """The items of a pass: the wrapped loader's when the limit cuts nothing, else the
        limit's batches of its batch size (None when its state does not say it)."""
        items = self.loader.num_items()
        if items is None:
            return None
        if self.batches >= len(self.loader):
            return items
        batch_size = self.loader.state_dict().get("batch_size")
        if isinstance(batch_size, int) and not isinstance(batch_size, bool):
            return min(items, self.batches * batch_size)
        return None

    @property
    def device(self) -> torch.device:
        return self.loader.device

    def to_device(self, device: DeviceLike) -> LimitedLoader[BatchT]:
        """The same limit over the wrapped loader moved to ``device`` (same position)."""
        moved = LimitedLoader(self.loader.to_device(device), self.batches)
        moved._cut = self._cut
        return moved

    def slice(self, start: int, end: int) -> LimitedLoader[BatchT]:
        """The same limit over a slice of the wrapped loader."""
        return LimitedLoader(self.loader.slice(start, end), self.batches)

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": LIMITED_KIND,
            "batches": self.batches,
            "cut": self._cut,
            "loader": self.loader.state_dict(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("kind") != LIMITED_KIND or state.get("batches") != self.batches:
            raise ValueError(
                f"cannot load loader state: it is not a limit of {self.batches} batches "
                f"(kind {state.get('kind')!r}, batches {state.get('batches')!r})"
            )
        self.loader.load_state_dict(state["loader"])
        self._cut = state.get("cut") is True

    def close(self) -> None:
        self.loader.close()

    def __repr__(self) -> str:
        return f"LimitedLoader({self.loader!r}, batches={self.batches})"


class _LimitedPass(Generic[BatchT]):
    """One pass: the wrapped pass's batches up to the limit, its progress out of the limited
    pass's items."""

    __slots__ = ("_done", "_inner", "_items", "_owner")

    def __init__(
        self, owner: LimitedLoader[BatchT], inner: DataLoaderIterator[BatchT], items: int | None
    ) -> None:
        self._owner, self._inner, self._items = owner, inner, items
        self._done = 0

    def __iter__(self) -> _LimitedPass[BatchT]:
        return self

    def __next__(self) -> BatchT:
        if self._done >= self._owner.batches:
            raise StopIteration
        batch = next(self._inner)
        self._done += 1
        if self._done == self._owner.batches and not self._inner.progress().is_completed:
            self._owner._cut = True
        return batch

    def progress(self) -> Progress:
        inner = self._inner.progress()
        total = self._items
        if self._done >= self._owner.batches:  # the limit's last batch ends the pass
            total = inner.items_processed
        return Progress(inner.items_processed, total if total is not None else inner.items_total)
