"""The training loop's checkpointer: strategy, four files per epoch, manifest, async writes.

Layout of ``directory`` (the builder passes ``{run_dir}/checkpoint``)::

    model-{e}.safetensors       model_record(model)
    optim-{e}.safetensors       optimizer_record(optim)
    scheduler-{e}.safetensors   the LR scheduler's state (state_record)
    state-{e}.safetensors       ember's training state: counters, RNG, loaders, early stopping,
                                and "checkpointing_strategy" (added here, see below)
    manifest-{e}.json           written last: the epoch is complete once it exists and verifies

Mid-round checkpoints (``mid_round.py``) are the same four files and a manifest in
``step-{k}/`` (:meth:`LearningCheckpointer.checkpoint_mid_round`). The checkpointing strategy is
not asked about them: they come with no validation value to rank them by. At most one is kept:
each one removes the previous one once it is committed, and a round-end checkpoint that is saved
removes those of its round and before (a resume starts from it instead).

How the strategy's state is kept. :meth:`LearningCheckpointer.checkpoint` first asks the
strategy for this epoch's actions, then adds ``"checkpointing_strategy":
strategy.state_dict()`` to the state record's metadata. The saved state therefore already
includes this epoch's decision: a run resumed from epoch ``e`` continues exactly as one that was
never interrupted. :meth:`LearningCheckpointer.restore` loads it back into the strategy and
removes the key from the returned state record. Callers build ``records.state`` without that key
(it is reserved: passing it raises ValueError).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from ember._checks import check_positive_int
from ember._errors import CheckpointError
from ember._rundir.best_epoch import STRATEGY_STATE_KEY
from ember._rundir.checkpoints import (
    RECORDS,
    check_epoch,
    checkpoint_file_name,
    mid_round_directory,
)
from ember._rundir.manifest import (
    complete_epochs,
    delete_manifest,
    latest_complete_epoch,
    manifest_path,
    read_manifest,
    write_manifest,
)
from ember.train._checkpoint.asynchronous import checkpoint_writer
from ember.train._checkpoint.checkpointer import TrainingRecords
from ember.train._checkpoint.file import FileCheckpointer, checked_directory, deserialize
from ember.train._checkpoint.mid_round import (
    ResumePoint,
    VerifiedPoint,
    delete_mid_round,
    latest_complete_point,
    mid_round_points,
    point_directory,
)
from ember.train._checkpoint.record import Record
from ember.train._checkpoint.shard_index import check_index_size
from ember.train._checkpoint.sharded import delete_shards
from ember.train._checkpoint.strategy import (
    CheckpointingAction,
    CheckpointingStrategy,
    Delete,
    Save,
)
from ember.train._metric.query import MetricQuery

__all__ = ["LearningCheckpointer", "restore_verified"]

_log = logging.getLogger(__name__)


class LearningCheckpointer:
    """Checkpoints a training run in ``directory`` as its ``strategy`` decides.

    ``checkpoint(epoch, records, query)`` does, in order::

        raise the error of an earlier failed write, if any (once)
        actions = strategy.checkpointing(epoch, query)          # on the caller's thread, now
        state = records.state + {"checkpointing_strategy": strategy.state_dict()}
        then, on the "checkpoint-writer" thread (or inline when asynchronous=False):
            if Save in actions:
                refuse a record holding a NaN or an infinity (CheckpointError naming it)
                remove manifest-{epoch}.json if an older run left one (the epoch is re-written)
                write model, optim, scheduler, state files        # atomic each
                write manifest-{epoch}.json                       # commits the epoch
            for Delete(e) in actions, only after the commit:
                remove manifest-{e}.json, then e's four files

    A failed write stops that job (so nothing is deleted after a failed save) and is re-raised
    with a note naming the epoch and the file, once, by the next ``checkpoint``, ``flush`` or
    ``close``. The records are snapshots: the caller may change the weights as soon as
    ``checkpoint`` returns.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        strategy: CheckpointingStrategy,
        *,
        asynchronous: bool = True,
    ) -> None:
        self._directory = checked_directory(directory)
        self._strategy = strategy
        self._files = _files(self._directory)
        self._writer = checkpoint_writer() if asynchronous else None
        self._closed = False

    def __repr__(self) -> str:
        return f"LearningCheckpointer({str(self._directory)!r}, {self._strategy!r})"

    def __enter__(self) -> LearningCheckpointer:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def directory(self) -> Path:
        """The checkpoint directory."""
        return self._directory

    @property
    def strategy(self) -> CheckpointingStrategy:
        """The checkpointing strategy (its state is saved with every checkpoint)."""
        return self._strategy

    def checkpoint(
        self, epoch: int, records: TrainingRecords, query: MetricQuery
    ) -> TrainingRecords:
        """Apply the strategy's decision for ``epoch`` (see the class doc for the exact order).

        Returns the records as they are (or would be) written, strategy state included, for
        :meth:`save`.
        """
        if self._closed:
            raise CheckpointError(f"{self!r} is closed")
        check_epoch(epoch)
        if STRATEGY_STATE_KEY in records.state.metadata:
            raise ValueError(
                f"the state record must not contain {STRATEGY_STATE_KEY!r}: "
                "the checkpointer adds it"
            )
        if self._writer is not None:
            self._writer.raise_pending()
        actions = tuple(self._strategy.checkpointing(epoch, query))
        for action in actions:
            if not isinstance(action, Save | Delete):
                raise TypeError(f"{self._strategy!r} returned {action!r}, not Save or Delete")
            if isinstance(action, Delete):
                check_epoch(action.epoch)
        records = self._with_strategy_state(records)

        def job() -> None:
            self._apply(epoch, records, actions)

        if self._writer is None:
            job()
        else:
            self._writer.submit(job)
        return records

    def checkpoint_mid_round(self, epoch: int, step: int, records: TrainingRecords) -> None:
        """Save the mid-round checkpoint at ``step`` of round ``epoch`` into ``step-{step}/``
        (with the strategy's state, which it does not change), then remove every other mid-round
        checkpoint; written on the writer thread as :meth:`checkpoint` writes."""
        if self._closed:
            raise CheckpointError(f"{self!r} is closed")
        check_epoch(epoch)
        check_positive_int("step", step)
        if self._writer is not None:
            self._writer.raise_pending()
        records = self._with_strategy_state(records)
        directory = mid_round_directory(self._directory, step)

        def job() -> None:
            self._save(epoch, records, _files(directory), directory)
            for point in mid_round_points(self._directory):
                if point.step is not None and point.step != step:
                    self._delete_mid_round(point.step, f"step {step}")

        if self._writer is None:
            job()
        else:
            self._writer.submit(job)

    def restore_mid_round(self, epoch: int, step: int) -> TrainingRecords:
        """Wait for pending writes, verify the mid-round checkpoint at ``step`` of round
        ``epoch`` and read it (the strategy's state is loaded as :meth:`restore` does)."""
        check_epoch(epoch)
        check_positive_int("step", step)
        self._wait()
        directory = mid_round_directory(self._directory, step)
        if not manifest_path(directory, epoch).exists():
            raise CheckpointError(
                f"no complete mid-round checkpoint at step {step} of epoch {epoch} in {directory}"
            )
        return self._restore_from(epoch, _files(directory), directory)

    def latest_complete_point(self) -> ResumePoint | None:
        """The newest complete checkpoint of either kind (damaged ones are skipped), or None."""
        self._wait()
        return latest_complete_point(self._directory, RECORDS)

    def save(self, epoch: int, records: TrainingRecords) -> None:
        """Make sure ``epoch`` is on disk, whatever the strategy decided for it.

        ``records`` are what :meth:`checkpoint` returned for ``epoch``. Used for a graceful stop:
        the last epoch-boundary state is kept even if the strategy had not kept it.
        """
        if self._closed:
            raise CheckpointError(f"{self!r} is closed")
        check_epoch(epoch)
        if STRATEGY_STATE_KEY not in records.state.metadata:
            raise ValueError("save() takes the records returned by checkpoint()")

        def job() -> None:
            if not manifest_path(self._directory, epoch).exists():
                self._save_round_end(epoch, records)

        if self._writer is None:
            job()
        else:
            self._writer.submit(job)

    def restore(self, epoch: int) -> TrainingRecords:
        """Wait for pending writes, verify epoch ``epoch`` against its manifest and read it.

        The strategy's saved state is loaded into :attr:`strategy` (if it does not fit a strategy
        that was changed since, a warning is logged and the strategy keeps its own state). A
        missing epoch raises CheckpointError listing the complete ones; a damaged file raises
        CheckpointError naming it and what differs.
        """
        check_epoch(epoch)
        self._wait()
        if not manifest_path(self._directory, epoch).exists():
            raise CheckpointError(
                f"no complete checkpoint of epoch {epoch} in {self._directory}; "
                f"complete epochs: {self.complete_epochs()}"
            )
        try:
            return self._restore_from(epoch, self._files, self._directory)
        except CheckpointError as error:
            error.add_note(f"complete epochs in {self._directory}: {self.complete_epochs()}")
            raise

    def _restore_from(
        self, epoch: int, files: dict[str, FileCheckpointer], directory: Path
    ) -> TrainingRecords:
        loaded = self._read(epoch, files, directory)
        return _with_strategy_loaded(self._strategy, epoch, loaded, files["state"].path(epoch))

    def _with_strategy_state(self, records: TrainingRecords) -> TrainingRecords:
        """``records`` with the strategy's state added to the state record."""
        metadata = dict(records.state.metadata)
        metadata[STRATEGY_STATE_KEY] = self._strategy.state_dict()
        state = Record(tensors=dict(records.state.tensors), metadata=metadata)
        return TrainingRecords(
            records.model, records.optim, records.scheduler, state, records.shards
        )

    def complete_epochs(self) -> list[int]:
        """Epochs whose manifest lists all four files and every file verifies (reads them all)."""
        self._wait()
        return complete_epochs(self._directory, RECORDS)

    def latest_complete_epoch(self) -> int | None:
        """The newest complete epoch (damaged ones are skipped), or None."""
        self._wait()
        return latest_complete_epoch(self._directory, RECORDS)

    def flush(self) -> None:
        """Wait for pending writes; raise the error of a failed one (once)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        """Finish pending writes and stop the writer thread; raise a pending error once.

        Idempotent: a second call does nothing.
        """
        self._closed = True
        if self._writer is not None:
            self._writer.close()

    def _read(
        self, epoch: int, files: dict[str, FileCheckpointer], directory: Path
    ) -> dict[str, Record]:
        manifest = read_manifest(directory, epoch)
        loaded: dict[str, Record] = {}
        for name, checkpointer in files.items():
            check_index_size(directory, manifest, name)
            expected = manifest.file(checkpointer.path(epoch).name)
            if expected is None:
                raise CheckpointError(
                    f"checkpoint manifest {manifest_path(directory, epoch)} does not list "
                    f"{checkpointer.path(epoch).name}"
                )
            loaded[name] = checkpointer.restore(epoch, expected)
        return loaded

    # --- writer side ---------------------------------------------------------------------------

    def _wait(self) -> None:
        if self._writer is not None:
            self._writer.wait()

    def _apply(
        self, epoch: int, records: TrainingRecords, actions: tuple[CheckpointingAction, ...]
    ) -> None:
        if any(isinstance(action, Save) for action in actions):
            self._save_round_end(epoch, records)
        for action in actions:
            if isinstance(action, Delete):
                self._delete(action.epoch, epoch)

    def _save_round_end(self, epoch: int, records: TrainingRecords) -> None:
        """Save round ``epoch``; then the mid-round checkpoints of it and before are older than
        a checkpoint on disk, and are removed."""
        self._save(epoch, records, self._files, self._directory)
        for point in mid_round_points(self._directory):
            if point.epoch <= epoch and point.step is not None:
                self._delete_mid_round(point.step, f"epoch {epoch}")

    def _save(
        self,
        epoch: int,
        records: TrainingRecords,
        checkpointers: dict[str, FileCheckpointer],
        directory: Path,
    ) -> None:
        what = f"saving epoch {epoch}" + (
            "" if directory == self._directory else f" in {directory.name}"
        )
        manifest = manifest_path(directory, epoch)
        # every file is checked before anything changes on disk: a record with a NaN (a NaN
        # gradient under a finite loss) leaves the older checkpoints as they are
        for name in RECORDS:
            checkpointers[name].refuse_non_finite(epoch, getattr(records, name))
        # an older checkpoint of this epoch (from a run resumed before it) must stop being
        # complete before its files are replaced
        with _noting(what, manifest):
            delete_manifest(directory, epoch)
        files = []
        for name in RECORDS:
            checkpointer = checkpointers[name]
            with _noting(what, checkpointer.path(epoch)):
                files.append(checkpointer.write(epoch, getattr(records, name)))
        files.extend(records.shards)  # written and reported by every rank before this job
        with _noting(what, manifest):
            write_manifest(directory, epoch, files)

    def _delete_mid_round(self, step: int, current: str) -> None:
        directory = mid_round_directory(self._directory, step)
        with _noting(
            f"deleting the mid-round checkpoint of step {step} after {current}", directory
        ):
            delete_mid_round(self._directory, step)

    def _delete(self, epoch: int, current: int) -> None:
        what = f"deleting epoch {epoch} after epoch {current}"
        with _noting(what, manifest_path(self._directory, epoch)):
            delete_manifest(self._directory, epoch)
        for checkpointer in self._files.values():
            with _noting(what, checkpointer.path(epoch)):
                checkpointer.delete(epoch)
        delete_shards(self._directory, epoch)


def restore_verified(checkpointer: LearningCheckpointer, point: VerifiedPoint) -> TrainingRecords:
    """The records of ``point``, a checkpoint of ``checkpointer`` read and verified when it was
    chosen (``resume.py``), parsed from the bytes read then (nothing is read or hashed again);
    the strategy's saved state is loaded as :meth:`LearningCheckpointer.restore` loads it, and
    a failure names the checkpoint as it does."""
    directory = point_directory(checkpointer.directory, point)
    epoch, files = point.epoch, point.take()
    try:
        loaded = {}
        for name in RECORDS:
            check_index_size(directory, point.manifest, name)
            path = directory / checkpoint_file_name(name, epoch)
            loaded[name] = deserialize(files.pop(name), path, name, epoch)
        state = directory / checkpoint_file_name("state", epoch)
        return _with_strategy_loaded(checkpointer.strategy, epoch, loaded, state)
    except CheckpointError as error:
        if point.step is None:
            complete = complete_epochs(checkpointer.directory, RECORDS)
            error.add_note(f"complete epochs in {checkpointer.directory}: {complete}")
        raise


def _with_strategy_loaded(
    strategy: CheckpointingStrategy, epoch: int, loaded: dict[str, Record], state_path: Path
) -> TrainingRecords:
    """The records ``loaded`` of ``epoch``, the strategy's state, saved in the state record,
    loaded into ``strategy`` and taken out of the record."""
    metadata = dict(loaded["state"].metadata)
    if STRATEGY_STATE_KEY not in metadata:
        raise CheckpointError(f"checkpoint file {state_path} has no {STRATEGY_STATE_KEY!r}")
    _load_strategy_state(strategy, epoch, metadata.pop(STRATEGY_STATE_KEY))
    state = Record(tensors=loaded["state"].tensors, metadata=metadata)
    return TrainingRecords(loaded["model"], loaded["optim"], loaded["scheduler"], state)


def _load_strategy_state(strategy: CheckpointingStrategy, epoch: int, state: Any) -> None:
    try:
        strategy.load_state_dict(state)
    except (ValueError, TypeError, KeyError) as error:
        _log.warning(
            "the checkpointing-strategy state saved at epoch %d does not fit %r (%s); "
            "it starts from its current state",
            epoch,
            strategy,
            error,
        )


def _files(directory: Path) -> dict[str, FileCheckpointer]:
    """The four files of a checkpoint in ``directory``, by name."""
    return {name: FileCheckpointer(directory, name) for name in RECORDS}


@contextmanager
def _noting(what: str, path: Path) -> Iterator[None]:
    """Add a note naming the epoch and the file to an exception passing through."""
    try:
        yield
    except BaseException as error:
        error.add_note(f"ember: checkpoint failed while {what}, at {path}")
        raise
