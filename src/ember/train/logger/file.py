"""Metric logs as text files, one per metric, split and epoch (Burn's layout, DESIGN §6).

``{directory}/{train|valid}/epoch-{N}/{Name}.log`` where ``Name`` is the metric name with
spaces replaced by ``_``. A numeric metric writes one ``value,weight`` line per batch and a last
``value,final`` line with the epoch value. A re-run epoch (after a resume) starts its files anew.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from ember.train.metric.base import MetricDefinition, MetricEntry, NumericEntry
from ember.train.metric.store import Split

__all__ = ["FileMetricLogger", "metric_file_name"]


def metric_file_name(name: str) -> str:
    """The file name a metric's values are logged under."""
    return name.replace(" ", "_") + ".log"


class FileMetricLogger:
    """Writes metric entries under ``directory``; see the module docstring for the layout."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"metric log directory is a file: {str(self.directory)!r}")
        self._files: dict[tuple[str, Split], IO[str]] = {}
        self._epoch: dict[Split, int] = {}
        self._lock = threading.Lock()

    def path(self, name: str, epoch: int, split: Split) -> Path:
        """Where ``name``'s values for ``epoch`` and ``split`` are written."""
        return self.directory / split.value / f"epoch-{epoch}" / metric_file_name(name)

    def log_definition(self, definition: MetricDefinition) -> None:
        """Nothing to record: files are created with their first entry."""

    def log(self, entries: Sequence[MetricEntry], epoch: int, split: Split) -> None:
        """Append one line per available entry."""
        with self._lock:
            if self._epoch.get(split) != epoch:
                self._close_split(split)
                self._epoch[split] = epoch
            for entry in entries:
                if not entry.is_available:
                    continue
                file = self._files.get((entry.name, split))
                if file is None:
                    path = self.path(entry.name, epoch, split)
                    path.parent.mkdir(parents=True, exist_ok=True)
                    file = path.open("w", encoding="utf-8")
                    self._files[(entry.name, split)] = file
                file.write(entry.serialized + "\n")

    def end_split(self, epoch: int, split: Split) -> None:
        """Close the split's files so that their content is complete on disk."""
        with self._lock:
            self._close_split(split)
            self._epoch.pop(split, None)

    def read_numeric(self, name: str, epoch: int, split: Split) -> list[NumericEntry]:
        """Parse the file of ``name``; a malformed line raises ``ValueError`` naming the file."""
        with self._lock:
            if self._epoch.get(split) == epoch and (name, split) in self._files:
                self._files[(name, split)].flush()
        path = self.path(name, epoch, split)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        entries = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                entries.append(NumericEntry.parse(line))
            except ValueError as error:
                raise ValueError(f"{path}:{number}: {error}") from None
        return entries

    def close(self) -> None:
        """Flush and close every open file."""
        with self._lock:
            for split in list(self._epoch):
                self._close_split(split)
            self._epoch.clear()

    def _close_split(self, split: Split) -> None:
        for key in [key for key in self._files if key[1] is split]:
            self._files.pop(key).close()
