"""``load``: a run directory (or several) read back as a :class:`Run`, its values as rows.

::

    run = ember.runs.load("artifacts/run")
    run.config["optimizer"], run.last_epoch, run.best_epoch, run.stop_reason
    run.values("valid", "Loss")            # {1: 0.52, 2: 0.31, ...}
    run.rows("item")                       # [MetricRow(run, split, epoch, step, metric, ...)]
    run.to_pandas()                        # one row per epoch value (pip install ember[pandas])
    runs = ember.runs.load(["artifacts/a", "sweep/*"])    # several: directories or patterns
    runs.to_pandas("item")                 # every batch of every run, with a ``run`` column

Values are read from the files each time they are asked for, so a run still being written
gives what its files hold now. Under ``DistributedDataParallel`` only rank 0 writes the run
directory: it is the one to load.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from ember._rundir.config import read_config
from ember._rundir.facts import RunFacts, epochs_logged, read_facts
from ember._rundir.metric_logs import epoch_directories
from ember._rundir.summary import read_summary_json
from ember.runs._logs import SPLITS, MetricRow, SplitLog, read_logs
from ember.train import LearnerSummary, MetricSummary, Split

__all__ = [
    "Level",
    "Many",
    "Run",
    "Runs",
    "describe",
    "load",
    "read_summary",
    "rows_to_pandas",
    "unit_of",
]

Level = Literal["epoch", "item"]
"""Which rows: one per epoch value (``"epoch"``) or one per batch line (``"item"``)."""

Many = list[Any] | tuple[Any, ...]
"""Several runs: a list (or tuple) of directories (``str``, ``os.PathLike``) and glob patterns,
any mix of them (a list's element type is not checked: lists are invariant)."""

_COLUMNS = ("run", "split", "epoch", "step", "metric", "value", "weight")


@dataclass(frozen=True)
class Run:
    """A training run read back from its directory (see :func:`load`).

    ``config`` is ``config.json`` (the run's configuration, {} without one), ``summary`` the
    ``summary.json`` table (None without one). ``last_epoch`` is the last completed epoch (a
    round, in a step run), ``best_epoch`` the one the checkpointing strategy keeps (None
    without a metric strategy or checkpoints), ``stop_reason`` why the latest launch stopped
    early (early stopping, an interrupt, a pruned trial), ``finished`` whether the run reached
    its end (``num_epochs``, ``max_steps`` or early stopping; an interrupted run resumes),
    ``failed`` whether its latest launch ended with an error.
    """

    directory: Path
    name: str
    config: Mapping[str, Any] = field(repr=False)
    summary: LearnerSummary | None = field(repr=False)
    last_epoch: int
    best_epoch: int | None
    stop_reason: str | None
    finished: bool
    failed: bool

    def logs(self) -> list[SplitLog]:
        """Every numeric metric's lines, per split and epoch, as the files hold them now."""
        return read_logs(self.directory)

    def metrics(self, split: str | Split | None = None) -> list[str]:
        """The numeric metrics logged (on ``split``, or on any), sorted."""
        wanted = None if split is None else _split(split)
        return sorted({log.metric for log in self.logs() if wanted in (None, log.split)})

    def rows(self, level: Level = "epoch") -> list[MetricRow]:
        """The run's values as rows: one per epoch value (``"epoch"``, default) or one per
        batch line (``"item"``), by split, epoch and metric, in the order they were logged."""
        return _rows([self], level)

    def values(self, split: str | Split, metric: str) -> dict[int, float]:
        """The epoch values of ``metric`` on ``split`` (``"train"``, ``"valid"``), by epoch, as
        ``LearningResult.values`` gives them; ValueError naming the metrics logged there when
        ``metric`` is not one of them."""
        wanted = _split(split)
        found = {
            row.epoch: row.value
            for log in self.logs()
            if log.split is wanted and log.metric == metric
            if (row := log.epoch_row(self.name)) is not None
        }
        if not found:
            raise ValueError(
                f"the run {self.name!r} logged no metric {metric!r} on the {wanted.value} split "
                f"(logged there: {self.metrics(wanted)})"
            )
        return found

    def to_pandas(self, level: Level = "epoch") -> Any:
        """:meth:`rows` as a ``pandas.DataFrame`` with columns ``run, split, epoch, step,
        metric, value, weight`` (``step`` a nullable integer); needs ``pip install
        ember[pandas]``."""
        return rows_to_pandas(self.rows(level))

    def summary_from_logs(self) -> LearnerSummary:
        """The summary table rebuilt from the logs (epochs 1 to ``last_epoch``; no model
        description, which is not logged): what ``ember summary`` prints without
        ``summary.json``."""
        values: dict[tuple[Split, str], list[tuple[int, float]]] = {}
        for log in self.logs():  # the epochs logged only: an epoch-N far ahead costs nothing
            row = log.epoch_row(self.name)
            if row is not None and log.epoch <= self.last_epoch:
                values.setdefault((log.split, log.metric), []).append((log.epoch, row.value))
        order = sorted(values, key=lambda key: (SPLITS.index(key[0]), key[1]))
        rows = tuple(
            MetricSummary.from_values(*key, values[key], unit_of([self], key[1])) for key in order
        )
        return LearnerSummary(self.last_epoch, rows)

    def describe(self) -> str:
        """One line: how far the run got and how it ended."""
        facts = RunFacts(
            self.last_epoch, self.best_epoch, self.stop_reason, self.finished, self.failed
        )
        return describe(facts, self.config)


@dataclass(frozen=True)
class Runs(Sequence[Run]):
    """Several runs read back together (see :func:`load`); each has a name of its own (its
    directory's, with as much of the path as tells it from the others)."""

    runs: tuple[Run, ...]

    @overload
    def __getitem__(self, index: int) -> Run: ...

    @overload
    def __getitem__(self, index: slice) -> Runs: ...

    def __getitem__(self, index: int | slice) -> Run | Runs:
        """The run at ``index`` (a slice gives a :class:`Runs`)."""
        if isinstance(index, slice):
            return Runs(self.runs[index])
        return self.runs[index]

    def __len__(self) -> int:
        return len(self.runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)

    def rows(self, level: Level = "epoch") -> list[MetricRow]:
        """Every run's rows (:meth:`Run.rows`), run after run."""
        return _rows(self.runs, level)

    def to_pandas(self, level: Level = "epoch") -> Any:
        """Every run's rows as one ``pandas.DataFrame`` (:meth:`Run.to_pandas`; the ``run``
        column tells them apart)."""
        return rows_to_pandas(self.rows(level))


@overload
def load(source: str | os.PathLike[str]) -> Run: ...


@overload
def load(source: Many) -> Runs: ...


def load(source: str | os.PathLike[str] | Many) -> Run | Runs:
    """Read the run in the directory ``source``, or, given a list (or tuple) of directories
    and glob patterns (``"sweep/*"``), every run they name, in that order (a pattern's matches
    sorted).

    Raises ``FileNotFoundError`` naming a directory that holds no run (no ``config.json`` and
    no metric logs) or a pattern that matches none, ``ValueError`` naming a ``config.json`` or
    ``summary.json`` that cannot be read.
    """
    if isinstance(source, list | tuple):
        entries: list[str | os.PathLike[str]] = list(source)
        directories = [path for entry in entries for path in _expand(entry)]
        return Runs(tuple(_load(path, name) for path, name in _names(directories)))
    if not isinstance(source, str | os.PathLike):
        raise TypeError(
            "load takes a run directory, or a list of directories and glob patterns, got "
            f"{type(source).__name__}"
        )
    path = Path(source)
    if not path.exists() and glob.has_magic(str(source)):
        raise FileNotFoundError(
            f"no run directory {str(source)!r}: to load every run a pattern matches, give it "
            f"in a list: load([{str(source)!r}])"
        )
    return _load(path, path.resolve().name)


def _expand(entry: str | os.PathLike[str]) -> list[Path]:
    text = os.fspath(entry)
    if Path(text).exists() or not glob.has_magic(text):
        return [Path(text)]
    matches = sorted(Path(match) for match in glob.glob(text) if Path(match).is_dir())
    if not matches:
        raise FileNotFoundError(f"no run directory matches the pattern {text!r}")
    return matches


def _names(directories: list[Path]) -> list[tuple[Path, str]]:
    """Each directory with a name: its last path component, or as many as tell it apart."""
    parts = [path.resolve().parts for path in directories]
    depth = 1
    while depth < max((len(p) for p in parts), default=1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            break
        depth += 1
    return [(path, "/".join(p[-depth:])) for path, p in zip(directories, parts, strict=True)]


def _load(directory: Path, name: str) -> Run:
    if not directory.is_dir():
        raise FileNotFoundError(f"no training run in {str(directory)!r}: no such directory")
    epochs = epoch_directories(directory)
    config = read_config(directory)
    summary = read_summary(directory)
    if not epochs and not config and summary is None:
        raise FileNotFoundError(
            f"no training run in {str(directory)!r}: no config.json, no summary.json and no "
            "metric logs under its train/ or valid/ epoch-N directories"
        )
    facts = read_facts(directory, summary, epochs_logged(directory, config, epochs))
    return Run(
        directory,
        name,
        config,
        summary,
        facts.last_epoch,
        facts.best_epoch,
        facts.stop_reason,
        facts.finished,
        facts.failed,
    )


def read_summary(directory: Path) -> LearnerSummary | None:
    """``summary.json`` (None without one); ValueError naming a file that is not a summary
    (RunFileError, also a ValueError, for one the run readers refuse)."""
    data = read_summary_json(directory)
    try:
        return None if data is None else LearnerSummary.from_json(data)
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(
            f"{directory / 'summary.json'} is not a learner summary: {error!r}"
        ) from None


def describe(facts: RunFacts, config: Mapping[str, Any]) -> str:
    """One line: how far the run got and how it ended."""
    how = "finished" if facts.finished else "failed" if facts.failed else "not finished"
    reason = f" ({facts.stop_reason})" if facts.stop_reason else ""
    total = config.get("num_epochs")
    of = f" of {total}" if isinstance(total, int) and config.get("max_steps") is None else ""
    return f"epoch {facts.last_epoch}{of}, {how}{reason}"


def _rows(runs: Sequence[Run], level: Level) -> list[MetricRow]:
    if level not in ("epoch", "item"):
        raise ValueError(f"level must be 'epoch' or 'item', got {level!r}")
    rows: list[MetricRow] = []
    for run in runs:
        for log in run.logs():
            if level == "item":
                rows.extend(log.item_rows(run.name))
            elif (row := log.epoch_row(run.name)) is not None:
                rows.append(row)
    return rows


def rows_to_pandas(rows: Sequence[MetricRow]) -> Any:
    """``rows`` as a ``pandas.DataFrame`` (see :meth:`Run.to_pandas`)."""
    try:
        import pandas
    except ImportError as error:
        raise ImportError(
            "to_pandas needs pandas: pip install ember[pandas] (or read run.rows(), plain "
            "frozen dataclasses)"
        ) from error
    columns: dict[str, Any] = {name: [getattr(row, name) for row in rows] for name in _COLUMNS}
    frame = pandas.DataFrame(columns, columns=list(_COLUMNS))
    frame["epoch"] = frame["epoch"].astype("int64")
    frame["step"] = frame["step"].astype("Int64")
    frame["value"] = frame["value"].astype("float64")
    frame["weight"] = frame["weight"].astype("float64")
    return frame


def _split(split: str | Split) -> Split:
    if isinstance(split, Split) and split in SPLITS:
        return split
    if split in ("train", "valid"):
        return Split(split)
    raise ValueError(f"split must be 'train' or 'valid', got {split!r}")


def unit_of(runs: Sequence[Run], metric: str) -> str | None:
    """The unit of ``metric`` as the runs recorded it (the first that did: ``config.json``'s
    ``units``, else a ``summary.json`` row), or None."""
    for run in runs:
        units = run.config.get("units")
        if isinstance(units, Mapping) and metric in units:
            return str(units[metric])
        rows = [] if run.summary is None else run.summary.metrics
        unit = next((row.unit for row in rows if row.name == metric and row.unit), None)
        if unit is not None:
            return unit
    return None
