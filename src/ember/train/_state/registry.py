"""The run's state as a registry of named parts: :class:`RunState` saves them in order into a
checkpoint's records and restores them backwards (the parts: ``parts.py``; the keys on disk: the
package's docstring).

A snapshot starts the state file's JSON (its format, the round and, inside a round, the step),
lets every part write its entry into a :class:`Snapshot` (the main process's parts; a part
marked ``everywhere`` on every process) and returns the records; a restore checks that the
state file is that point's, then lets every part read its entry back, last first, and says
where the loop goes on (:class:`Resumed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ember._errors import CheckpointError
from ember._rundir.atomic import CheckpointFile
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._checkpoint.record import Record, state_record

__all__ = ["Resumed", "RunState", "Snapshot", "StatePart"]

_FORMAT = "ember.training-state"


@dataclass(slots=True)
class Snapshot:
    """One checkpoint while it is built or read: its point, the weights and scheduler records,
    and the state file's JSON (``state``) and tensors; ``where`` names it in errors."""

    point: ResumePoint
    state: dict[str, Any]
    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    model: Record | None = None
    optim: Record | None = None
    scheduler: Record | None = None
    shards: tuple[CheckpointFile, ...] = ()
    where: str = ""
    trained: bool = False
    """A mid-round checkpoint's round has no training left (a stop at its last step): saved,
    or read back."""

    def count(self, entry: Mapping[str, Any], key: str, default: int) -> int:
        """The count ``key`` of a state ``entry`` (``default`` in a checkpoint older than it);
        a CheckpointError naming the checkpoint and the value if it is not a count."""
        value = entry.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError(
                f"the checkpoint of {self.where} holds {key}={value!r}, not a count"
            )
        return value


class StatePart(Protocol):
    """One named part of a run's checkpoint: it writes its entry and reads it back."""

    @property
    def everywhere(self) -> bool:
        """Whether every process saves it (a collective), not only the main one."""
        ...

    def save(self, snapshot: Snapshot) -> None:
        """Write this part into ``snapshot``."""
        ...

    def load(self, snapshot: Snapshot) -> None:
        """Put this part back from ``snapshot`` (CheckpointError naming what does not fit)."""
        ...


class RunState:
    """The run's checkpointed state: its named parts, saved in order and restored backwards."""

    def __init__(self, *, main: bool) -> None:
        self.main = main
        self._parts: dict[str, StatePart] = {}

    def register(self, name: str, part: StatePart) -> None:
        """Checkpoint ``part`` under ``name`` (names are unique)."""
        if name in self._parts:
            raise ValueError(f"a state part named {name!r} is registered already")
        self._parts[name] = part

    def snapshot(self, point: ResumePoint, *, trained: bool = False) -> TrainingRecords | None:
        """The records of the run at ``point`` (``trained``: a mid-round point whose round has
        no training left) on the main process; None elsewhere (where only the parts that are
        collectives ran)."""
        state: dict[str, Any] = {"format": _FORMAT, "epoch": point.epoch}
        if point.step is not None:
            state["step"] = point.step
        snapshot = Snapshot(point, state, trained=trained)
        for part in self._parts.values():
            if self.main or part.everywhere:
                part.save(snapshot)
        if not self.main:
            return None
        assert snapshot.model is not None and snapshot.optim is not None
        assert snapshot.scheduler is not None
        # the parts wrote JSON (tensors encoded into snapshot.tensors): copied, and checked
        metadata = state_record(snapshot.state).metadata
        return TrainingRecords(
            snapshot.model,
            snapshot.optim,
            snapshot.scheduler,
            Record(tensors=snapshot.tensors, metadata=metadata),
            snapshot.shards,
        )

    def restore(self, records: TrainingRecords, point: ResumePoint, where: str) -> Resumed:
        """Put every part back from ``records``, the checkpoint of ``point`` (verified by the
        checkpointer; nothing is loaded with pickle), in the reverse order of a snapshot; where
        the loop goes on from is returned."""
        state = records.state.metadata
        if (
            state.get("format") != _FORMAT
            or state.get("epoch") != point.epoch
            or state.get("step") != point.step
        ):
            raise CheckpointError(
                f"the state file of {where} is not an ember training state for that point "
                f"(format {state.get('format')!r}, epoch {state.get('epoch')!r}, step "
                f"{state.get('step')!r})"
            )
        snapshot = Snapshot(
            point,
            dict(state),
            dict(records.state.tensors),
            records.model,
            records.optim,
            records.scheduler,
            records.shards,
            where,
        )
        for part in reversed(list(self._parts.values())):
            part.load(snapshot)
        return Resumed(point.starting_epoch, point.step is not None, snapshot.trained)


@dataclass(frozen=True, slots=True)
class Resumed:
    """Where a restored run goes on: ``round``, from a mid-round checkpoint (``mid_round``:
    the round's counters are the checkpoint's) whose training may be over already
    (``trained``: a stop at the round's last step; the round goes straight to validation)."""

    round: int
    mid_round: bool = False
    trained: bool = False
