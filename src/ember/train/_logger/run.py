"""A run's loggers: the file logs plus the loggers given, and the files handed to them at the end.

The file logs (``FileMetricLogger`` on the run directory) are always there unless the builder
said ``without_file_logs()``; they are what the summary, early stopping and metric-based
checkpointing read back. Without them, one of the given loggers must read back
(:class:`~ember.train._logger.base.MetricReader`), or the run is refused before training.
"""

from __future__ import annotations

from pathlib import Path

from ember.train._checkpoint.strategy import KeepLastNCheckpoints
from ember.train._config import DEFAULT_CHECKPOINTERS, TrainingConfig
from ember.train._logger.base import MetricLogger, MetricReader
from ember.train._logger.file import FileMetricLogger

__all__ = ["ARTIFACTS", "run_artifacts", "run_loggers"]

ARTIFACTS = {
    "config": "config.json",
    "summary": "summary.json",
    "curves": "metrics.png",  # drawn by `ember plot`
}
"""The run's files handed to the loggers at the end, by name, relative to the run directory."""


def run_loggers(config: TrainingConfig) -> list[MetricLogger]:
    """The loggers of a run: the file logs first (unless turned off, or given already), then the
    given ones. Raises ``ValueError`` when nothing reads back what something needs."""
    given = list(config.loggers)
    if config.file_logs:
        directory = config.directory.resolve()
        if not any(
            isinstance(logger, FileMetricLogger) and logger.directory.resolve() == directory
            for logger in given
        ):
            given.insert(0, FileMetricLogger(config.directory))
        return given
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


def run_artifacts(directory: Path) -> dict[str, Path]:
    """The run's files that exist, by name (see :data:`ARTIFACTS`)."""
    paths = {name: directory / file for name, file in ARTIFACTS.items()}
    return {name: path for name, path in paths.items() if path.is_file()}
