"""A run's loggers: the file logs plus the loggers given, and the files handed to them at the end.

The file logs (``FileMetricLogger`` on the run directory) are always there unless the builder
said ``without_file_logs()``; they are what the summary, early stopping and metric-based
checkpointing read back. Without them, one of the given loggers must read back
(:class:`~ember.train._logger.base.MetricReader`), or the run is refused before training.

At the end the loggers get the run's files: ``config.json`` and ``summary.json`` when they
exist, and the files a logger asked for (``wanted_artifacts``, :class:`~ember.extend.Logger`),
written then: the best checkpoint's export and the curves PNG. Both cost time and disk (a copy
of the weights, matplotlib), so no run writes them unasked.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from pathlib import Path

from ember._protocols import member
from ember._rundir.best_epoch import best_epoch
from ember._rundir.config import CONFIG_FILE
from ember._rundir.curves import CURVES_FILE, draw_curves, run_curves
from ember._rundir.manifest import manifest_epochs
from ember._rundir.summary import SUMMARY_FILE
from ember.train._checkpoint.export import export_weights
from ember.train._checkpoint.strategy import KeepLastNCheckpoints
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._logger.base import Logger, MetricLogger, MetricReader, check_artifacts
from ember.train._logger.file import FileMetricLogger

__all__ = [
    "ARTIFACTS",
    "run_artifacts",
    "run_loggers",
    "wanted_artifacts",
]

log = logging.getLogger("ember.train")

ARTIFACTS = {
    "config": CONFIG_FILE,
    "summary": SUMMARY_FILE,
    "model": "model.safetensors",  # the best epoch's weights, exported
    "curves": CURVES_FILE,  # what `ember plot` draws
}
"""The run's files handed to the loggers at the end, by name, relative to the run directory."""


def wanted_artifacts(loggers: Sequence[MetricLogger]) -> tuple[str, ...]:
    """The artifacts the loggers ask for, each checked (:func:`check_artifacts`)."""
    wanted: dict[str, None] = {}
    for logger in loggers:
        wanted.update(dict.fromkeys(check_artifacts(member(logger, Logger, "wanted_artifacts")())))
    return tuple(wanted)


def run_loggers(config: TrainingConfig) -> list[MetricLogger]:
    """The loggers of a run: the file logs first (unless turned off, or given already), then the
    given ones, each handed the run's interrupter (the optional ``use_interrupter``). Raises
    ``ValueError`` when nothing reads back what something needs."""
    given = list(config.loggers)
    for logger in given:
        member(logger, Logger, "use_interrupter")(config.interrupter)
    if config.file_logs:
        directory = config.directory.resolve()
        if not any(
            isinstance(logger, FileMetricLogger) and logger.directory.resolve() == directory
            for logger in given
        ):
            given.insert(0, FileMetricLogger(config.directory))
        _check_wanted(config, given)
        return given
    _check_wanted(config, given)
    needs = _readers_needed(config)
    if needs and not any(isinstance(logger, MetricReader) for logger in given):
        names = ", ".join(type(logger).__name__ for logger in given) or "none"
        raise ValueError(
            f"without_file_logs() leaves nothing to read metric values back from, but "
            f"{' and '.join(needs)} need them (loggers given: {names}); keep the file logs "
            "(drop without_file_logs()), or add a logger that reads back, e.g. "
            "with_metric_logger(CsvMetricLogger(path)) or InMemoryMetricLogger()"
        )
    return given


def _readers_needed(config: TrainingConfig) -> list[str]:
    needs = []
    if config.summary:
        needs.append("the summary (summary())")
    if config.early_stopping is not None:
        needs.append(f"early stopping ({type(config.early_stopping).__name__})")
    if config.checkpointer == DEFAULT_CHECKPOINTERS and not isinstance(
        config.checkpointing_strategy, KeepLastNCheckpoints
    ):
        strategy = config.checkpointing_strategy
        name = "the default best-valid-Loss one" if strategy is None else type(strategy).__name__
        needs.append(f"the checkpointing strategy ({name})")
    return needs


def _check_wanted(config: TrainingConfig, loggers: Sequence[MetricLogger]) -> None:
    """Refuse, before training, an artifact the run could not write."""
    wanted = wanted_artifacts(loggers)
    if "model" in wanted and config.checkpointer is None:
        raise ValueError(
            "a logger asks for the 'model' artifact (the best checkpoint's export), but the run "
            "keeps no checkpoints; call with_default_checkpointers() (or with_checkpointers(...))"
        )
    if "curves" in wanted and not config.file_logs:
        raise ValueError(
            "a logger asks for the 'curves' artifact, drawn from the file logs, but the run "
            "writes none (without_file_logs()); keep the file logs"
        )


def run_artifacts(
    directory: Path, wanted: Collection[str] = (), checkpoints: Path | None = None
) -> dict[str, Path]:
    """Write the ``wanted`` artifacts (the best checkpoint of ``checkpoints`` exported, the
    curves drawn), then give the run's files by name (see :data:`ARTIFACTS`): the config and
    summary when they exist, the wanted ones when written. Run after the last checkpoint write.

    An artifact there is nothing for (no checkpoint yet, no epoch logged) is left out, with a
    warning in the run's log; a failure to write one is raised.
    """
    paths = {name: directory / ARTIFACTS[name] for name in ("config", "summary")}
    found = {name: path for name, path in paths.items() if path.is_file()}
    if "model" in wanted and checkpoints is not None:
        path = directory / ARTIFACTS["model"]
        if checkpoints.is_dir() and manifest_epochs(checkpoints):
            export_weights(checkpoints, path, "best" if best_epoch(checkpoints) else "last")
            found["model"] = path
        else:
            log.warning("No 'model' artifact: the run saved no checkpoint")
    if "curves" in wanted:
        try:  # as ember plot draws them
            found["curves"] = draw_curves([run_curves(directory)], directory / ARTIFACTS["curves"])
        except FileNotFoundError as error:  # no epoch was logged
            log.warning("No 'curves' artifact: %s", error)
    return found
