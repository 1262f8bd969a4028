"""Checkpoints of a ``DistributedDataParallel`` fit: rank 0 writes, every rank restores.

A checkpoint must let every rank resume exactly where it was, but only rank 0 writes files.
:class:`DistributedCheckpointer` gathers every rank's RNG state on rank 0, which saves them in
its state record (under :data:`RANKS_RNG_KEY`, in rank order) with the rest of the checkpoint;
on a resume every rank reads that checkpoint and restores its own RNG state from it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from ember.data import DataLoader
from ember.distributed._messages import gather_bytes
from ember.distributed._processes import collective
from ember.train._checkpoint.record import Record, state_record
from ember.train._checkpoint.rng import rng_state
from ember.train._checkpoint.training import TrainingCheckpointer
from ember.train._learner import Learner
from ember.train._metric.store import MetricQuery
from ember.train._strategy.ddp.ranks import Ranks

if TYPE_CHECKING:
    from ember.train._checkpoint.learning import LearningCheckpointer, TrainingRecords

__all__ = ["RANKS_RNG_KEY", "DistributedCheckpointer"]

log = logging.getLogger("ember.train")

RANKS_RNG_KEY = "ranks_rng"  # in rank 0's state record: every rank's RNG state, in rank order


class _RankRecords:
    """Stands in for the ``LearningCheckpointer`` inside a ``TrainingCheckpointer``: what rank 0
    saves also holds every rank's RNG state, and each rank restores its own."""

    def __init__(self, checkpointer: LearningCheckpointer, rank: int) -> None:
        self._checkpointer = checkpointer
        self._rank = rank
        self.rng_states: list[Any] = []

    @property
    def directory(self) -> Any:
        return self._checkpointer.directory

    def checkpoint(
        self, epoch: int, records: TrainingRecords, query: MetricQuery
    ) -> TrainingRecords:
        state = state_record({**records.state.metadata, RANKS_RNG_KEY: self.rng_states})
        return self._checkpointer.checkpoint(
            epoch, dataclasses.replace(records, state=state), query
        )

    def save(self, epoch: int, records: TrainingRecords) -> None:
        self._checkpointer.save(epoch, records)

    def restore(self, epoch: int) -> TrainingRecords:
        records = self._checkpointer.restore(epoch)
        metadata = dict(records.state.metadata)
        states = metadata.pop(RANKS_RNG_KEY, None) or []
        if self._rank < len(states):
            metadata["rng"] = states[self._rank]
        elif states:
            log.warning(
                "the checkpoint of epoch %d holds the RNG states of %d ranks, not of rank %d: it "
                "continues from rank 0's (the run is not exactly the uninterrupted one)",
                epoch,
                len(states),
                self._rank,
            )
        state = Record(tensors=records.state.tensors, metadata=metadata)
        return dataclasses.replace(records, state=state)

    def latest_complete_epoch(self) -> int | None:
        return self._checkpointer.latest_complete_epoch()

    def close(self) -> None:
        """Nothing: ``launch`` closes the real checkpointer."""


class DistributedCheckpointer(TrainingCheckpointer):
    """Every rank restores; rank 0 alone writes, with the RNG states every rank sends it."""

    def __init__(self, checkpointer: TrainingCheckpointer, ranks: Ranks) -> None:
        self._records = _RankRecords(checkpointer.checkpointer, ranks.rank)
        super().__init__(cast("LearningCheckpointer", self._records), checkpointer.early_stopping)
        self._ranks = ranks

    def checkpoint(
        self,
        epoch: int,
        learner: Learner[Any],
        loaders: Mapping[str, DataLoader[Any]],
        query: MetricQuery,
    ) -> None:
        mine = json.dumps(rng_state()).encode("utf-8")
        with collective("gathering the RNG states for the checkpoint"):
            states = gather_bytes(mine, 0, group=self._ranks.cpu)
        if states is not None:
            self._records.rng_states = [json.loads(state) for state in states]
            super().checkpoint(epoch, learner, loaders, query)

    def save_last(self) -> int | None:
        return super().save_last() if self._ranks.is_main else None
