"""The values metrics produce, as loggers and renderers receive them: a metric's state for the
renderer (:class:`MetricState`), a number for the loggers (:class:`MetricValue`, with its global
step) and the text of a metric that logs text (:class:`MetricText`). They live here, below the
loggers and renderers that share them."""

from __future__ import annotations

from dataclasses import dataclass

from ember._frozen import set_field
from ember._rundir.metric_logs import NumericEntry
from ember.train._metric.base import MetricEntry
from ember.train._vocabulary import Split

__all__ = ["MetricState", "MetricText", "MetricValue", "tracker_points"]


@dataclass(frozen=True, slots=True, init=False)
class MetricState:
    """A metric's entry for the renderer; ``numeric`` is set for numeric metrics."""

    entry: MetricEntry
    numeric: NumericEntry | None = None

    def __init__(self, entry: MetricEntry, numeric: NumericEntry | None = None) -> None:
        set_field(self, "entry", entry)  # written out: one per batch (ember/_frozen.py)
        set_field(self, "numeric", numeric)


@dataclass(frozen=True, slots=True, init=False)
class MetricValue:
    """One number a metric logged: a batch value (with its weight, when the metric gives one) or,
    with ``final``, the epoch value at the end of the split.

    ``step`` is the run's optimizer steps so far, kept across resumes: the global step a
    tracker plots against (batches that accumulate gradients, and a validation pass, share the
    step of the training before them). ``text`` is the text the metric serialized (the line of
    its log file); empty, :attr:`line` writes the number as metric logs do.
    """

    name: str
    split: Split
    epoch: int
    step: int
    value: float
    weight: float | None = None
    final: bool = False
    text: str = ""

    def __init__(  # written out: one per batch (ember/_frozen.py)
        self,
        name: str,
        split: Split,
        epoch: int,
        step: int,
        value: float,
        weight: float | None = None,
        final: bool = False,
        text: str = "",
    ) -> None:
        set_field(self, "name", name)
        set_field(self, "split", split)
        set_field(self, "epoch", epoch)
        set_field(self, "step", step)
        set_field(self, "value", value)
        set_field(self, "weight", weight)
        set_field(self, "final", final)
        set_field(self, "text", text)

    @property
    def entry(self) -> NumericEntry:
        """The value as a metric-log entry (what :class:`MetricReader` gives back)."""
        return NumericEntry(self.value, self.weight, self.final)

    @property
    def line(self) -> str:
        """The metric-log line of this value."""
        return self.text or self.entry.serialize()


@dataclass(frozen=True, slots=True)
class MetricText:
    """The entry of a metric that logs text, not a number (e.g. a GPU reading)."""

    name: str
    split: Split
    epoch: int
    step: int
    text: str


def tracker_points(value: MetricValue) -> list[tuple[str, int]]:
    """Where a tracker plots ``value``: ``(name, step)`` pairs, the same in every tracker.

    * ``train/{name}``: each training batch's value at its global step;
    * ``valid/{name}``: the validation epoch value at the global step it was measured after (one
      point per epoch, on the training curve's axis: a validation pass does not step, so its
      batches would all share one step and are not plotted);
    * ``{split}/{name}/epoch``: each epoch value at step = epoch.
    """
    tag = f"{value.split.value}/{value.name}"
    if value.final:
        points = [(f"{tag}/epoch", value.epoch)]
        return [*points, (tag, value.step)] if value.split is Split.VALID else points
    return [(tag, value.step)] if value.split is Split.TRAIN else []
