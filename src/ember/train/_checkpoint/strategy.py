"""Checkpointing strategies: which epochs to save and which to delete (Burn's rules).

After each epoch the training loop asks ``strategy.checkpointing(epoch, query)`` and gets a list
of actions: :class:`Save` (checkpoint this epoch) and :class:`Delete` (remove an older one). The
rules are Burn's:

* :class:`KeepLastNCheckpoints` saves every epoch and deletes epoch ``epoch - n`` once positive
  (with ``checkpoint_every``, the checkpoint ``n`` saves back).
* :class:`MetricCheckpointingStrategy` keeps only the best epoch for a metric.
* :class:`ComposedCheckpointingStrategy` saves when *any* strategy wants to and deletes an epoch
  only once *every* strategy has flagged it (a Delete, or no action at all for that epoch).

Beyond Burn, strategies are stateful in a way that survives a resume: ``state_dict()``
returns JSON and ``load_state_dict()`` restores it, so a resumed run makes the decisions an
uninterrupted one would have made (Burn forgets the best epoch and the flags, and leaks files).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from ember._checks import check_positive_int
from ember._rundir.checkpoints import check_epoch
from ember.train._metric.base import NamedMetric, metric_name
from ember.train._metric.query import MetricQuery
from ember.train._vocabulary import Aggregate, Direction, Split, as_vocabulary, warn_aggregate

__all__ = [
    "CheckpointingAction",
    "CheckpointingStrategy",
    "ComposedCheckpointingStrategy",
    "Delete",
    "KeepLastNCheckpoints",
    "MetricCheckpointingStrategy",
    "Save",
    "default_checkpointing_strategy",
]


@dataclass(frozen=True, slots=True)
class Save:
    """Checkpoint the current epoch."""


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the checkpoint of ``epoch``."""

    epoch: int


CheckpointingAction: TypeAlias = Save | Delete
"""What a checkpointing strategy decides for an epoch: ``Save`` or ``Delete``."""


class CheckpointingStrategy(Protocol):
    """Decides, after each epoch, what to save and delete; its state is JSON ("exact resume")."""

    def checkpointing(self, epoch: int, query: MetricQuery) -> list[CheckpointingAction]:
        """The actions for the end of ``epoch``; ``query`` reads the logged metric values."""
        ...

    def state_dict(self) -> dict[str, Any]:
        """The strategy's state as JSON (a fresh copy)."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a ``state_dict()``; ValueError if it does not fit this strategy."""
        ...


def _expect_kind(strategy: object, state: object) -> dict[str, Any]:
    kind = type(strategy).__name__
    if not isinstance(state, dict) or state.get("strategy") != kind:
        found = state.get("strategy") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"checkpointing state for {found!r} does not fit {kind}")
    return state


class KeepLastNCheckpoints:
    """Save every epoch; keep the last ``n`` (Burn's ``KeepLastNCheckpoints``).

    It counts checkpoints, not epochs: with ``checkpoint_every(epochs=10)`` it keeps the last
    ``n`` of epochs 10, 20, ... (the saved epochs are in its state, so a resume goes on)."""

    def __init__(self, n: int) -> None:
        # Burn accepts 0, which saves an epoch and deletes it at once: never useful.
        self.n = check_positive_int("n (checkpoints to keep)", n)
        self._kept: list[int] | None = []  # None: a state that did not list them (0.1.0's)

    def __repr__(self) -> str:
        return f"KeepLastNCheckpoints({self.n})"

    def checkpointing(self, epoch: int, query: MetricQuery) -> list[CheckpointingAction]:
        """``[Save()]``, plus a ``Delete`` of each saved epoch older than the last ``n``
        (``epoch - n`` when every epoch is saved, as Burn)."""
        check_epoch(epoch)
        # 0.1.0 saved every epoch and did not list them: the last n before this one
        before = list(range(max(1, epoch - self.n), epoch)) if self._kept is None else self._kept
        saved = [kept for kept in before if kept < epoch] + [epoch]
        self._kept = saved[-self.n :]
        return [Save(), *(Delete(old) for old in saved[: -self.n])]

    def state_dict(self) -> dict[str, Any]:
        """The kind and the saved epochs it keeps (a resumed run deletes them in turn)."""
        kept = None if self._kept is None else list(self._kept)
        return {"strategy": type(self).__name__, "kept": kept}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Check that ``state`` came from this kind of strategy, and take its saved epochs."""
        kept = _expect_kind(self, state).get("kept")
        if kept is not None and not (
            isinstance(kept, list)
            and all(isinstance(epoch, int) and not isinstance(epoch, bool) for epoch in kept)
        ):
            raise ValueError(f"checkpointing state lists kept epochs {kept!r}, not epochs")
        self._kept = None if kept is None else list(kept)


class MetricCheckpointingStrategy:
    """Keep only the best epoch for a metric (Burn's ``MetricCheckpointingStrategy``).

    ``best`` is ``query.find_epoch(...)``, or the current epoch when nothing was logged (then the
    strategy behaves like "keep the last one"). It deletes the previously kept epoch when the best
    changes and saves the current epoch when it is the best.
    """

    def __init__(
        self,
        metric: str | NamedMetric,
        direction: Direction | str = Direction.LOWEST,
        split: Split | str = Split.VALID,
        *burn: Split,
        aggregate: Aggregate | None = None,
    ) -> None:
        if isinstance(direction, Aggregate) or aggregate is not None:
            # 0.1.0's (and Burn's) order: (metric, aggregate, direction, split)
            warn_aggregate("MetricCheckpointingStrategy")
        if isinstance(direction, Aggregate):
            direction = split if isinstance(split, Direction) else Direction.LOWEST
            split = burn[0] if burn else Split.VALID
        self.name = metric_name(metric)
        self.direction = as_vocabulary(Direction, direction, "direction")
        self.split = as_vocabulary(Split, split, "split")
        self.current: int | None = None  # the epoch this strategy keeps

    def __repr__(self) -> str:
        return f"MetricCheckpointingStrategy({self.name!r}, {self.direction}, {self.split})"

    def checkpointing(self, epoch: int, query: MetricQuery) -> list[CheckpointingAction]:
        """``Delete(kept)`` if the best epoch moved from it; ``Save()`` if ``epoch`` is best."""
        check_epoch(epoch)
        best = query.find_epoch(self.name, self.direction, self.split)
        if best is None:
            best = epoch
        actions: list[CheckpointingAction] = []
        if self.current is not None and self.current != best:
            actions.append(Delete(self.current))
        if best == epoch:
            actions.append(Save())
        self.current = best
        return actions

    def state_dict(self) -> dict[str, Any]:
        """``{"strategy": "MetricCheckpointingStrategy", "metric": name, "current": kept}``."""
        return {"strategy": type(self).__name__, "metric": self.name, "current": self.current}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the kept epoch; ValueError if ``state`` is for another strategy or metric."""
        state = _expect_kind(self, state)
        current = state.get("current")
        if state.get("metric") != self.name:
            raise ValueError(
                f"checkpointing state for metric {state.get('metric')!r} does not fit {self.name!r}"
            )
        if current is not None:
            check_epoch(current)
        self.current = current


class ComposedCheckpointingStrategy:
    """Combine strategies: save when any saves; delete an epoch once every one has flagged it.

    A strategy flags an epoch by returning ``Delete(epoch)`` for it, or by returning no action at
    all at that epoch. Deletions are checked only for epochs some strategy asks to delete, in the
    order asked; ``Save`` always comes first in the result (Burn's ``composed.rs``).
    """

    def __init__(self, strategies: Sequence[CheckpointingStrategy]) -> None:
        self.strategies = list(strategies)
        if not self.strategies:
            raise ValueError("ComposedCheckpointingStrategy needs at least one strategy, got none")
        self.deleted: list[set[int]] = [set() for _ in self.strategies]

    def __repr__(self) -> str:
        return f"ComposedCheckpointingStrategy({self.strategies!r})"

    def checkpointing(self, epoch: int, query: MetricQuery) -> list[CheckpointingAction]:
        """The composed actions for ``epoch`` (see the class doc)."""
        check_epoch(epoch)
        saved = False
        to_check: list[int] = []
        for flagged, strategy in zip(self.deleted, self.strategies, strict=True):
            actions = strategy.checkpointing(epoch, query)
            if not actions:  # this strategy does not want the current epoch
                flagged.add(epoch)
            for action in actions:
                if isinstance(action, Delete):
                    flagged.add(action.epoch)
                    to_check.append(action.epoch)
                elif isinstance(action, Save):
                    saved = True
                else:
                    raise TypeError(f"{strategy!r} returned {action!r}, not Save or Delete")
        result: list[CheckpointingAction] = [Save()] if saved else []
        for candidate in to_check:
            if all(candidate in flagged for flagged in self.deleted):
                result.append(Delete(candidate))
                for flagged in self.deleted:
                    flagged.discard(candidate)
        return result

    def state_dict(self) -> dict[str, Any]:
        """The flags of each sub-strategy and the sub-strategies' own states."""
        return {
            "strategy": type(self).__name__,
            "deleted": [sorted(flagged) for flagged in self.deleted],
            "strategies": [strategy.state_dict() for strategy in self.strategies],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the flags and every sub-strategy; ValueError if the composition differs.

        On an error nothing changes: sub-strategies already loaded are put back.
        """
        state = _expect_kind(self, state)
        deleted, states = state.get("deleted"), state.get("strategies")
        count = len(self.strategies)
        if not isinstance(deleted, list) or not isinstance(states, list):
            raise ValueError("checkpointing state of ComposedCheckpointingStrategy is malformed")
        if len(deleted) != count or len(states) != count:
            raise ValueError(
                f"checkpointing state holds {len(states)} strategies, this composition has {count}"
            )
        flags = []
        for epochs in deleted:
            if not isinstance(epochs, list):
                raise ValueError(f"checkpointing flags must be lists of epochs, got {epochs!r}")
            flags.append({check_epoch(e) for e in epochs})
        previous = [strategy.state_dict() for strategy in self.strategies]
        try:
            for strategy, sub_state in zip(self.strategies, states, strict=True):
                strategy.load_state_dict(sub_state)
        except BaseException:
            for strategy, sub_state in zip(self.strategies, previous, strict=True):
                strategy.load_state_dict(sub_state)
            raise
        self.deleted = flags


def default_checkpointing_strategy() -> ComposedCheckpointingStrategy:
    """Burn's default: keep the last 2 epochs and the one with the lowest mean valid Loss."""
    return ComposedCheckpointingStrategy(
        [
            KeepLastNCheckpoints(2),
            MetricCheckpointingStrategy("Loss", Direction.LOWEST, Split.VALID),
        ]
    )
