"""A run logged to Weights & Biases: its configuration, metrics at their global steps, the
summary and the run's files.

Needs the ``ember[wandb]`` extra, imported only when a logger is created::

    SupervisedTraining(...).with_metric_logger(
        WandbLogger(project="mnist", name="lr-0.1", artifacts=("model", "curves"))
    )

* **Where**: W&B's own settings decide online or offline (``mode``, else ``WANDB_MODE``); its
  files go to ``directory`` (default: the run directory, ``DIR/wandb/``), which must be
  writable: W&B would otherwise fall back to a temporary directory, so it is checked at launch.
* **Config**: the run's configuration (``DIR/config.json``), nested as it is.
* **Metrics**: named as :func:`~ember.train._logger.base.tracker_points` says, at W&B's step =
  the run's global step (its optimizer steps, kept across resumes): ``train/Loss`` (one point
  per optimizer step: the weighted mean of its batches' values, since a W&B step holds one
  value per key), ``valid/Loss`` at the step it followed, and ``{split}/Loss/epoch`` plotted
  against ``epoch``, logged with it.
* **End**: the summary as ``summary.txt`` and the run's files saved with the run (always
  ``config.json`` and ``summary.json``; ``"curves"``: ``metrics.png``), the model chosen with
  ``artifacts=("model",)`` as a W&B artifact of type ``model`` named ``model-{run id}`` (the
  best epoch's weights, ``model.safetensors``); the run is then finished.
* **Resume**: the W&B run id is kept in ``DIR/wandb-run.json`` with the last step and epochs
  logged; a resumed run of ember (``resume_latest()``/``checkpoint(n)``) continues the same W&B
  run (``resume="allow"``) and leaves out the points logged before (a resumed run computes them
  again, identical), so no step is logged twice. A train split that a stop cut short logs no
  epoch value (the resumed run logs the whole split's).
* **Failures** are named at launch, before training: W&B not installed, a directory it cannot
  write, ``wandb.init`` failing or not answering within ``init_timeout`` seconds. W&B's service
  process and threads are shut down when the run ends (unless another W&B run of the process
  is still open), so nothing of W&B outlives ``launch``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember._rundir.atomic import atomic_write
from ember.train._interrupter import Interrupter
from ember.train._logger.base import check_artifacts
from ember.train._metric.values import MetricValue, tracker_points
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["WandbLogger"]

RUN_FILE = "wandb-run.json"
_SETTINGS = {"save_code": False, "console": "off"}  # ember's renderer owns the terminal


def _wandb() -> Any:
    try:
        import wandb
    except ImportError as error:
        raise ImportError(
            "WandbLogger needs the wandb package: pip install ember[wandb]"
        ) from error
    return wandb


class WandbLogger:
    """Logs a run to the W&B ``project`` (see the module docstring).

    ``name``, ``entity``, ``group`` and ``tags`` are W&B's own; ``mode`` is ``"online"``,
    ``"offline"`` or ``"disabled"`` (None: W&B's default, ``WANDB_MODE``); ``directory`` where
    W&B writes its files (None: the run directory); ``settings`` more ``wandb.Settings``
    fields. ``artifacts`` chooses files the run writes at its end for this logger:
    ``"model"`` (the best checkpoint's export) and ``"curves"`` (the PNG of the curves).
    """

    def __init__(
        self,
        project: str = "ember",
        *,
        name: str | None = None,
        entity: str | None = None,
        group: str | None = None,
        tags: Sequence[str] = (),
        mode: str | None = None,
        directory: str | os.PathLike[str] | None = None,
        artifacts: Collection[str] = (),
        init_timeout: float = 60.0,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(project, str) or not project:
            raise ValueError(f"project must be a non-empty string, got {project!r}")
        if mode not in (None, "online", "offline", "disabled"):
            raise ValueError(f"mode must be 'online', 'offline' or 'disabled', got {mode!r}")
        if isinstance(init_timeout, bool) or not isinstance(init_timeout, int | float):
            raise TypeError(f"init_timeout must be a number of seconds, got {init_timeout!r}")
        self.artifacts = check_artifacts(artifacts)
        self._wandb = _wandb()
        self.project = project
        self.init = {"name": name, "entity": entity, "group": group, "tags": list(tags)}
        self.mode = mode
        self.directory = None if directory is None else Path(directory)
        self.settings = {**_SETTINGS, "init_timeout": float(init_timeout), **(settings or {})}
        self.run: Any = None
        self._record: Path | None = None
        self._logged: dict[str, int] = {}  # the last step, train and valid epochs logged
        self._before: dict[str, int] = {}  # the same, by the launches before this one
        self._defined: set[str] = set()
        self._pending: dict[str, list[float]] = {}  # per key: weighted sum and weights
        self._step: int | None = None  # the step of the pending row
        self._ended = False
        self._interrupter: Interrupter | None = None

    def use_interrupter(self, interrupter: Interrupter) -> None:
        """Keep the run's interrupter: a train split a stop cut short has no epoch value
        (its resumed run logs the whole split's)."""
        self._interrupter = interrupter

    def wanted_artifacts(self) -> Collection[str]:
        """The files chosen with ``artifacts`` (see :class:`~ember.extend.Logger`)."""
        return self.artifacts

    def start(self, config: Mapping[str, Any]) -> None:
        """Check the directory, start (or resume) the W&B run with the configuration."""
        run_dir = Path(config["directory"])
        files = self.directory or run_dir
        _check_writable(files)
        self._record = run_dir / RUN_FILE
        kept = _read_record(self._record) if config["resume"] is not None else None
        run_id = kept["id"] if kept else None  # None: W&B makes one
        self._before = dict(kept.get("logged", {})) if kept else {}
        self._logged = dict(self._before)
        try:
            self.run = self._wandb.init(
                project=self.project,
                id=run_id,
                resume="allow",
                reinit="create_new",  # another W&B run of the process is left alone
                dir=str(files),
                mode=self.mode,
                config=dict(config),
                settings=self._wandb.Settings(**self.settings),
                **self.init,
            )
        except Exception as error:  # a bad setting, no answer within init_timeout, no login
            raise RuntimeError(
                f"W&B could not start the run (wandb.init: {type(error).__name__}: {error}); "
                "check the project, entity and login, or log offline (WANDB_MODE=offline)"
            ) from error
        self._write_record()

    def log(self, values: Sequence[MetricValue]) -> None:
        """Gather the points of each step; send a step's row once the next step begins."""
        stopped = self._interrupter is not None and self._interrupter.should_stop()
        for value in values:
            if self._already_logged(value) or (
                stopped and value.final and value.split is Split.TRAIN
            ):
                continue
            if self._step is not None and value.step != self._step:
                self._send()
            self._step = value.step
            for key, _ in tracker_points(value):
                self._add(key, value)

    def _already_logged(self, value: MetricValue) -> bool:
        """A point an earlier launch of this run logged (a resumed run computes it again)."""
        if value.final:
            return value.epoch <= self._before.get(value.split.value, 0)
        return value.step <= self._before.get("step", -1)

    def _add(self, key: str, value: MetricValue) -> None:
        if key not in self._defined:
            step_metric = "epoch" if key.endswith("/epoch") and value.final else None
            if step_metric is not None:
                self.run.define_metric(key, step_metric=step_metric)
            self._defined.add(key)
        weight = 1.0 if value.weight is None or value.final else value.weight
        total = self._pending.setdefault(key, [0.0, 0.0])
        total[0] += value.value * weight
        total[1] += weight
        if value.final:
            self._pending["epoch"] = [float(value.epoch), 1.0]
            self._logged[value.split.value] = value.epoch
        elif value.split is Split.TRAIN:
            self._logged["step"] = value.step

    def _send(self) -> None:
        if self._pending and self.run is not None:
            row = {key: total / weights for key, (total, weights) in self._pending.items()}
            if "epoch" in row:
                row["epoch"] = int(row["epoch"])
            self.run.log(row, step=self._step)
        self._pending = {}

    def end_split(self, epoch: int, split: Split) -> None:
        """Send the split's last row; record what was logged (for a resume)."""
        self._send()
        self._write_record()

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Save the summary and the run's files with the run, log the model, finish it."""
        if self.run is None:
            return
        self._send()
        self._write_record()
        if summary is not None:
            text = Path(self.run.dir) / "summary.txt"
            text.write_text(f"{summary}\n", encoding="utf-8")
            self.run.save(str(text), base_path=str(text.parent), policy="now")
        for name, path in artifacts.items():
            if name == "model":
                artifact = self._wandb.Artifact(f"model-{self.run.id}", type="model")
                artifact.add_file(str(path))
                self.run.log_artifact(artifact)
            else:
                self.run.save(str(path), base_path=str(path.parent), policy="now")
        self.run.finish(exit_code=0)
        self._ended = True

    def close(self) -> None:
        """Finish a run that did not reach ``end`` as failed; shut W&B's service down."""
        run, self.run = self.run, None
        if run is None:
            return
        try:
            if not self._ended:
                run.finish(exit_code=1)
        finally:
            if self._wandb.run is None:  # no other W&B run of this process is open
                self._wandb.teardown()

    def _write_record(self) -> None:
        if self._record is None or self.run is None:
            return
        record = {"id": self.run.id, "project": self.project, "logged": self._logged}
        atomic_write(self._record, (json.dumps(record) + "\n").encode("utf-8"), sync=False)


def _check_writable(directory: Path) -> None:
    """W&B falls back to a temporary directory when it cannot write its own: refuse that."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise OSError(
            f"W&B cannot write its files in {str(directory)!r} ({error.strerror or error}); "
            "give WandbLogger(directory=...) a writable directory"
        ) from None


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no record (a run logged elsewhere before), or a damaged one
        return None
    return record if isinstance(record, dict) and isinstance(record.get("id"), str) else None
