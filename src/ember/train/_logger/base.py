"""The logger protocols: where metric values go (numbers, with their global step), and how the
event store reads them back.

A tracker (MLflow, Weights & Biases, a JSON-lines file) implements :class:`MetricLogger`::

    class PrintLogger:
        def start(self, config):            print("config", config)
        def log(self, values):              print(*(f"{v.split}/{v.name}@{v.step}={v.value}"
                                                     for v in values))
        def end_split(self, epoch, split):  pass
        def end(self, summary, artifacts):  print("artifacts", dict(artifacts))
        def close(self):                    pass

Loggers that keep values where they can be read again (files, memory, one CSV file) are also
:class:`MetricReader`; checkpointing strategies, early stopping and the summary ask them. A
logger that keeps what it logged where a later process finds it (files) can be cut back to where
a mid-round checkpoint left a split (:class:`ResumableLogger`), so a resumed run appends to the
split's logs with no line lost or repeated. A logger's optional members (the text of metrics
that log text, files the run writes only when asked, the run's error, the run's interrupter for
a logger that decides when it stops: a pruner) have defaults that do nothing: :class:`Logger`'s,
a base class to subclass.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ember._rundir.metric_logs import NumericEntry
from ember.train._interrupter import Interrupter
from ember.train._metric.values import MetricText, MetricValue
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = [
    "WRITTEN_WHEN_ASKED",
    "Logger",
    "MetricLogger",
    "MetricReader",
    "ResumableLogger",
    "check_artifacts",
]


@runtime_checkable
class MetricLogger(Protocol):
    """Receives a run's configuration, its metric values and its end, on the metrics thread.

    ``start`` is called once at launch, before training (an error there, such as an unreachable
    tracker, stops the launch). Then, per split of each epoch, ``log`` for each batch and once for
    the epoch values, then ``end_split``. ``end`` gets the summary (None without one) and the
    run's artifacts (``{"summary": path, ...}``: only files that exist), ``close`` is called
    last, also after an error (a logger with ``on_error`` is told the error
    before ``end``).
    """

    def start(self, config: Mapping[str, Any]) -> None:
        """The run's configuration (JSON-able: ``DIR/config.json``)."""
        ...

    def log(self, values: Sequence[MetricValue]) -> None:
        """The numbers of one batch, or the epoch values at the split end."""
        ...

    def end_split(self, epoch: int, split: Split) -> None:
        """The split of ``epoch`` ended: make everything logged for it durable."""
        ...

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Training ended: the summary and the paths of the run's files."""
        ...

    def close(self) -> None:
        """Flush and release files or connections; called once, also on error."""
        ...


@runtime_checkable
class MetricReader(Protocol):
    """A logger whose values can be read back (files, memory, CSV)."""

    def read_numeric(self, name: str, epoch: int, split: Split) -> list[NumericEntry]:
        """The numeric entries of ``name`` for ``epoch`` and ``split``; [] when none. Called on
        the training thread after the metrics thread was flushed."""
        ...


@runtime_checkable
class ResumableLogger(Protocol):
    """A logger whose logs of a split can be cut back to a saved position (``docs/design.md``,
    "Mid-round checkpoints").

    A mid-round checkpoint stores each such logger's :meth:`log_position` for the train split
    under way; a run resumed from it calls :meth:`resume_split` before it logs anything, so the
    lines the stopped run wrote after the checkpoint are dropped and the new ones follow on.
    """

    def log_position(self, epoch: int, split: Split) -> dict[str, Any]:
        """Where the logs of ``split`` in ``epoch`` end now, as JSON; everything logged before
        is written out first (it is where a resume finds it)."""
        ...

    def resume_split(self, epoch: int, split: Split, position: dict[str, Any]) -> None:
        """Cut the logs of ``split`` in ``epoch`` back to ``position`` (and drop what was logged
        after it) and append to them from there; ValueError naming what does not fit when the
        logs are shorter than ``position`` (they were changed since)."""
        ...


class Logger:
    """A logger that records nothing: subclass it and override what you record. Its methods are
    also the defaults of a logger's optional members, which a plain class may leave out:

    ``log_text(texts)``: the text entries of one batch or split end (metrics that log text,
    ``CudaMetric``); ``wanted_artifacts()``: the files the run writes only when asked, of
    ``"model"`` (the best epoch's weights, ``DIR/model.safetensors``) and ``"curves"`` (the
    per-epoch curves, ``DIR/metrics.png``; the ``plot`` extra), written at the run's end and
    handed to ``end`` (``launch`` refuses, before training, a request the run cannot meet);
    ``on_error(error)``: the run's first error, before ``end`` (a tracker marks the run failed);
    ``use_interrupter(interrupter)``: the handle that stops the run, given once per launch before
    ``start`` (a pruner stops with ``interrupter.stop(reason)``, as Ctrl-C would: the run ends
    with ``result.stop_reason`` set, its directory a valid run that ``resume_latest()``
    continues; called from a validation's ``end_split``, the stop takes effect before the next
    round trains when the run waits for its metrics at each round's end, which it does when it
    keeps checkpoints or has early stopping).
    """

    def start(self, config: Mapping[str, Any]) -> None:
        """The run's configuration."""

    def log(self, values: Sequence[MetricValue]) -> None:
        """The numbers of one batch, or the epoch values at the split end."""

    def end_split(self, epoch: int, split: Split) -> None:
        """The split of ``epoch`` ended."""

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Training ended."""

    def close(self) -> None:
        """Nothing to release."""

    def log_text(self, texts: Sequence[MetricText]) -> None:
        """Optional: the text entries of one batch, or of the split end."""

    def wanted_artifacts(self) -> Collection[str]:
        """Optional: the names of the files wanted, of ``"model"`` and ``"curves"``."""
        return ()

    def on_error(self, error: BaseException) -> None:
        """Optional: the run's error (the first one); ``end`` and ``close`` follow."""

    def use_interrupter(self, interrupter: Interrupter) -> None:
        """Optional: the handle that stops this run."""


WRITTEN_WHEN_ASKED = {
    "model": "the best epoch's weights as one safetensors file",
    "curves": "the per-epoch curves as a PNG (matplotlib)",
}
"""The artifacts a logger can ask for (``wanted_artifacts``, :class:`~ember.extend.Logger`)."""


def check_artifacts(names: object) -> tuple[str, ...]:
    """``names`` as a tuple (without repeats) when each is one of :data:`WRITTEN_WHEN_ASKED`;
    else TypeError or ValueError naming the value and the choices. ``"curves"`` needs
    matplotlib: ImportError saying what to install."""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise TypeError(
            f"artifacts must be a collection of names such as ('model', 'curves'), got {names!r}"
        )
    wanted = tuple(dict.fromkeys(names))
    for name in wanted:
        if name not in WRITTEN_WHEN_ASKED:
            choices = "; ".join(f"{key!r}: {what}" for key, what in WRITTEN_WHEN_ASKED.items())
            raise ValueError(f"unknown artifact {name!r}; choose from {choices}")
    if "curves" in wanted and importlib.util.find_spec("matplotlib") is None:
        raise ImportError("the 'curves' artifact needs matplotlib: pip install ember[plot]")
    return wanted
