"""The event store: where metric values are logged and read back, by split and epoch.

Checkpointing strategies, early stopping and the summary ask it questions such as "which epoch
had the lowest mean valid Loss?" through the :class:`MetricQuery` protocol. The epoch value of a
metric is the ``final`` line its logger wrote at the end of the split, or, without one, the
weighted mean of its batch values (``docs/design.md``, "Epoch values").
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember._protocols import member
from ember._rundir.metric_logs import NumericEntry, epoch_value
from ember.train._logger.base import Logger, MetricLogger, MetricReader, ResumableLogger
from ember.train._metric.values import MetricText, MetricValue
from ember.train._vocabulary import Aggregate, Direction, Split, warn_aggregate

if TYPE_CHECKING:
    from ember.train._metric.values import MetricState
    from ember.train._summary import LearnerSummary

__all__ = ["EventStore"]

log = logging.getLogger("ember.train")

_CACHE_SIZE = 256
"""Finished epoch values kept for ``find_metric``: the recent ones, which strategies ask for."""


class EventStore:
    """Routes metric values to the loggers and answers :class:`MetricQuery` questions from the
    loggers that read back (:class:`~ember.train._logger.base.MetricReader`).

    Written to on the metrics thread; queried on the training thread after a flush. The values
    of the latest finished epochs are cached (a bounded number) and ``find_epoch`` keeps only its
    best so far; an epoch still being logged is always read afresh.
    """

    def __init__(self, loggers: Sequence[MetricLogger]) -> None:
        self.loggers = list(loggers)
        # the protocols are checked once here: isinstance on a Protocol is too slow per batch
        self.readers = [logger for logger in self.loggers if isinstance(logger, MetricReader)]
        # optional members resolved once (Logger's no-op defaults for a logger without them)
        self._text_logs = [member(logger, Logger, "log_text") for logger in self.loggers]
        self._resumable = [logger for logger in self.loggers if isinstance(logger, ResumableLogger)]
        self._epoch: dict[Split, int] = {}
        self._cache: dict[tuple[str, int, Split], float] = {}  # bounded: _CACHE_SIZE
        # per (name, direction, split): the next epoch to read, the best epoch and its value
        self._best: dict[tuple[str, Direction, Split], tuple[int, int | None, float]] = {}
        # per split: the latest epoch's final values by metric (what on_validation_end gets)
        self._finals: dict[Split, tuple[int, dict[str, float]]] = {}
        self._lock = threading.Lock()

    def start(self, config: Mapping[str, Any]) -> None:
        """Give every logger the run's configuration (at launch, before training)."""
        for logger in self.loggers:
            logger.start(config)

    def start_split(self, split: Split, epoch: int) -> None:
        """Entries of ``split`` now belong to ``epoch``."""
        with self._lock:
            self._epoch[split] = epoch

    def log(self, split: Split, states: Sequence[MetricState], step: int) -> None:
        """Hand one batch's values (or the epoch values) to every logger, at global ``step``.

        A metric that is not numeric but logs a number is logged as one; text goes to the
        loggers that keep text. Entries without a value (``N/A``) are not logged.
        """
        self.log_many(split, [(states, step)])

    def log_many(self, split: Split, batches: Sequence[tuple[Sequence[MetricState], int]]) -> None:
        """:meth:`log` for several batches' values in order: one call per logger for all."""
        epoch = self._epoch.get(split, 1)
        values: list[MetricValue] = []
        texts: list[MetricText] = []
        for states, step in batches:
            for state in states:
                entry = state.entry
                if not entry.is_available:
                    continue
                serialized = entry.serialized
                numeric = state.numeric
                if numeric is None:
                    try:
                        numeric = NumericEntry.parse(serialized)
                    except ValueError:
                        texts.append(MetricText(entry.name, split, epoch, step, serialized))
                        continue
                values.append(
                    MetricValue(
                        entry.name,
                        split,
                        epoch,
                        step,
                        numeric.value,
                        numeric.weight,
                        numeric.final,
                        serialized,
                    )
                )
                if numeric.final:  # once a split: the epoch's values
                    self._keep_final(split, epoch, entry.name, numeric.value)
        if values:
            for logger in self.loggers:
                logger.log(values)
        if texts:
            for log_text in self._text_logs:
                log_text(texts)

    def _keep_final(self, split: Split, epoch: int, name: str, value: float) -> None:
        kept = self._finals.get(split)
        if kept is None or kept[0] != epoch:
            kept = self._finals[split] = (epoch, {})
        kept[1][name] = value

    def epoch_values(self, split: Split, epoch: int) -> dict[str, float]:
        """The epoch values every numeric metric of ``split`` logged for ``epoch`` (the latest
        epoch of the split only; read after a flush), by name."""
        kept = self._finals.get(split)
        return dict(kept[1]) if kept is not None and kept[0] == epoch else {}

    def end_split(self, split: Split) -> None:
        """The split ended: loggers make its files complete."""
        with self._lock:
            epoch = self._epoch.pop(split, 1)
        for logger in self.loggers:
            logger.end_split(epoch, split)

    def sync(self) -> None:
        """Have every logger that buffers lines (a ``sync()`` method, as ``FileMetricLogger``)
        write them out: called before a checkpoint, so its logs are on disk with it."""
        for logger in self.loggers:
            sync = getattr(logger, "sync", None)
            if callable(sync):
                sync()

    def log_positions(self, split: Split, epoch: int) -> list[dict[str, Any]]:
        """Where each logger that can be cut back (``ResumableLogger``) stands in ``split`` of
        ``epoch``, in logger order: what a mid-round checkpoint records."""
        return [
            {"logger": type(logger).__name__, "position": logger.log_position(epoch, split)}
            for logger in self._resumable
        ]

    def resume_split(self, split: Split, epoch: int, positions: Sequence[Any]) -> None:
        """Cut each logger back to the position a mid-round checkpoint recorded for it (see
        :meth:`log_positions`); a logger with none (added since) is warned of and goes on where
        it is."""
        for index, logger in enumerate(self._resumable):
            saved = positions[index] if index < len(positions) else None
            kind = type(logger).__name__
            if not isinstance(saved, dict) or saved.get("logger") != kind:
                log.warning(
                    "the checkpoint holds no position of the %s logger (the loggers changed since "
                    "it was written): its %s logs of epoch %d are continued as they are",
                    kind,
                    split.value,
                    epoch,
                )
                continue
            logger.resume_split(epoch, split, saved["position"])

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Give every logger the summary and the run's files; the first error is raised after
        every logger had its call."""
        _each(self.loggers, lambda logger: logger.end(summary, artifacts))

    def on_error(self, error: BaseException) -> None:
        """Tell every logger that the run failed (before ``end``)."""
        _each(self.loggers, lambda logger: member(logger, Logger, "on_error")(error))

    def close(self) -> None:
        """Flush every logger; errors of one do not keep the others from closing."""
        _each(self.loggers, lambda logger: logger.close())

    def find_metric(self, name: str, epoch: int, split: Split, *burn: Split) -> float | None:
        """The epoch value of ``name`` from the first logger that has it."""
        if isinstance(split, Aggregate):  # 0.1.0's (name, epoch, aggregate, split)
            warn_aggregate("find_metric")
            split = burn[0]
        return self._value(name, epoch, split)[0]

    def find_epoch(self, name: str, direction: Direction, split: Split, *burn: Split) -> int | None:
        """The best epoch so far; ties keep the earliest and NaN never wins.

        The best of the finished epochs is kept per question, so each call reads only the
        epochs logged since the last one (and nothing per epoch stays in memory).
        """
        if isinstance(direction, Aggregate):  # 0.1.0's (name, aggregate, direction, split)
            warn_aggregate("find_epoch")
            direction, split = split, burn[0]  # type: ignore[assignment]  # 0.1.0's order
        key = (name, direction, split)
        epoch, best_epoch, best = self._best.get(
            key, (1, None, math.inf if direction is Direction.LOWEST else -math.inf)
        )
        settled = True  # the epochs read so far are final: the next call starts after them
        while True:
            value, final = self._value(name, epoch, split)
            if value is None:
                break
            better = value < best if direction is Direction.LOWEST else value > best
            if better or (best_epoch is None and not math.isnan(value)):
                best, best_epoch = value, epoch
            epoch += 1
            settled = settled and final
            if settled:
                with self._lock:
                    self._best[key] = (epoch, best_epoch, best)
        return best_epoch

    def _value(self, name: str, epoch: int, split: Split) -> tuple[float | None, bool]:
        """The epoch value of ``name`` and whether it is final (its epoch is over)."""
        key = (name, epoch, split)
        cached = self._cache.get(key)
        if cached is not None:
            return cached, True
        for reader in self.readers:
            entries = reader.read_numeric(name, epoch, split)
            if entries:
                value = epoch_value(entries)
                with self._lock:
                    final = entries[-1].final and self._epoch.get(split) != epoch
                    if final:
                        self._cache[key] = value  # type: ignore[assignment]  # never None here
                        while len(self._cache) > _CACHE_SIZE:  # the oldest entries go first
                            del self._cache[next(iter(self._cache))]
                return value, final
        return None, False


def _each(loggers: Sequence[MetricLogger], call: Any) -> None:
    """``call(logger)`` for every logger, even after one failed; raise the first error."""
    errors: list[Exception] = []
    for logger in loggers:
        try:
            call(logger)
        except Exception as error:  # each logger must get its call
            errors.append(error)
    if errors:
        raise errors[0]
