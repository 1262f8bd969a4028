"""What a training checkpoint holds and how a run is put back from it (B4).

Besides the model, the optimizer and the scheduler, ember saves what an exact resume needs and
Burn does not keep: the RNG states of torch, numpy and Python, every loader's position and
shuffle stream, the early-stopping state and (through :class:`LearningCheckpointer`) the
checkpointing strategy's state. A run resumed at an epoch boundary therefore ends with exactly
the weights, optimizer state and metric logs of a run that was never interrupted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ember._errors import CheckpointError
from ember.data import DataLoader
from ember.train._checkpoint.learning import LearningCheckpointer, TrainingRecords
from ember.train._checkpoint.record import (
    load_model_record,
    load_optimizer_record,
    model_record,
    optimizer_record,
    state_record,
)
from ember.train._checkpoint.rng import rng_state, set_rng_state
from ember.train._learner import Learner
from ember.train._metric.store import MetricQuery

__all__ = ["TrainingCheckpointer"]

_FORMAT = "ember.training-state"


class TrainingCheckpointer:
    """Saves and restores a whole training run through a :class:`LearningCheckpointer`.

    It remembers the records of the last epoch boundary, so that a graceful stop in the middle
    of an epoch can make sure that state is on disk (:meth:`save_last`).
    """

    def __init__(self, checkpointer: LearningCheckpointer, early_stopping: Any = None) -> None:
        self.checkpointer = checkpointer
        self.early_stopping = early_stopping
        self._last: tuple[int, TrainingRecords] | None = None

    def checkpoint(
        self,
        epoch: int,
        learner: Learner[Any],
        loaders: Mapping[str, DataLoader[Any]],
        query: MetricQuery,
    ) -> None:
        """Snapshot the run after ``epoch`` and hand it to the checkpointing strategy."""
        state: dict[str, Any] = {
            "format": _FORMAT,
            "epoch": epoch,
            "rng": rng_state(),
            "loaders": {name: loader.state_dict() for name, loader in loaders.items()},
        }
        stateful = getattr(self.early_stopping, "state_dict", None)
        if stateful is not None:
            state["early_stopping"] = stateful()
        records = TrainingRecords(
            model_record(learner.model),
            optimizer_record(learner.optimizer),
            state_record(learner.lr_scheduler.state_dict()),
            state_record(state),
        )
        self._last = (epoch, self.checkpointer.checkpoint(epoch, records, query))

    def save_last(self) -> int | None:
        """Write the last epoch boundary's checkpoint if the strategy had not kept it."""
        if self._last is None:
            return None
        epoch, records = self._last
        self.checkpointer.save(epoch, records)
        return epoch

    def restore(
        self, epoch: int, learner: Learner[Any], loaders: Mapping[str, DataLoader[Any]]
    ) -> None:
        """Put the run back as it was after ``epoch`` (verified; never runs code)."""
        records = self.checkpointer.restore(epoch)
        state = records.state.metadata
        if state.get("format") != _FORMAT or state.get("epoch") != epoch:
            raise CheckpointError(
                f"the state file of epoch {epoch} in {self.checkpointer.directory} is not an "
                f"ember training state for that epoch (format {state.get('format')!r}, "
                f"epoch {state.get('epoch')!r})"
            )
        load_model_record(learner.model, records.model)
        load_optimizer_record(learner.optimizer, records.optim)
        learner.lr_scheduler.load_state_dict(dict(records.scheduler.metadata))
        saved_loaders = state.get("loaders", {})
        for name, loader in loaders.items():
            if name not in saved_loaders:
                raise CheckpointError(f"the checkpoint of epoch {epoch} has no {name} loader")
            loader.load_state_dict(saved_loaders[name])
        stateful = getattr(self.early_stopping, "load_state_dict", None)
        if stateful is not None and "early_stopping" in state:
            stateful(state["early_stopping"])
        set_rng_state(state["rng"])

    def latest_complete_epoch(self) -> int | None:
        """The newest complete checkpoint on disk."""
        return self.checkpointer.latest_complete_epoch()

    def close(self) -> None:
        """Finish pending writes; raise a pending write error once."""
        self.checkpointer.close()
