"""``ClosesOnExit``: ``with thing:`` gives the thing and closes it when the block ends, however
it ends (loaders, their shards, a strategy's device threads)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ["ClosesOnExit"]


class ClosesOnExit(ABC):
    """A base for objects that hold threads or other resources until ``close()``."""

    __slots__ = ()

    @abstractmethod
    def close(self) -> None:
        """Release what the object holds; closing twice does nothing more."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
