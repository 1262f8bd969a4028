"""A run logged to MLflow: its configuration as params, metrics with their steps, the summary and
the run's files as artifacts.

Needs the ``ember[mlflow]`` extra, imported only when a logger is created::

    SupervisedTraining(...).with_metric_logger(
        MLflowLogger(tracking_uri="http://127.0.0.1:5000", experiment="mnist", run_name="lr-0.1",
                     artifacts=("model", "curves"))
    )

* **Where**: ``tracking_uri`` is a server (``http://...``), a local ``sqlite:///path.db`` or
  ``file:`` store; without one, ``MLFLOW_TRACKING_URI`` if set, else
  ``sqlite:///DIR/mlflow.db`` in the run directory (artifacts beside it, in ``DIR/mlartifacts``).
  A server that does not answer, or a local sqlite store that cannot be written, is an error at
  launch, before training, in seconds, naming the URI.
* **Params**: the run's configuration (``DIR/config.json``) flattened to dotted keys
  (``optimizer.param_groups.0.lr``). MLflow params cannot change, so a resumed run adds only the
  keys the run does not have yet; its whole configuration is in the ``config.json`` artifact.
* **Metrics**: named and stepped as :func:`~ember.train._logger.base.tracker_points` says
  (``train/Loss`` at the global step, ``valid/Loss`` and ``{split}/Loss/epoch`` per epoch).
  MLflow accepts only letters, digits, ``_ - . /`` and spaces in a name: any other character
  becomes ``_`` (``Accuracy (%)`` is logged as ``Accuracy _``), so no metric is dropped.
* **End**: the summary as ``summary.txt`` and the run's files as artifacts: always
  ``config.json`` and ``summary.json``, and those chosen with ``artifacts``: ``"model"``, the
  best epoch's weights exported as ``model.safetensors`` (the run must keep checkpoints), and
  ``"curves"``, the curves ``metrics.png`` as ``ember plot`` draws them (needs matplotlib, the
  ``plot`` extra); the run is then finished: ``FAILED`` when training raised (the logger is an
  ``on_error``), else ``FINISHED``; a run that never reached ``end`` is marked ``FAILED`` at
  ``close``, which sends the values logged before the error first.
* **Resume**: the MLflow run id is kept in ``DIR/mlflow-run.json``; a resumed run of ember
  (``resume_latest()``/``checkpoint(n)``) continues the same MLflow run, its steps following
  the earlier ones.

Metrics are sent in batches (at every split end, or every 1000 values) on a thread of the
logger's own, so a slow server never holds up the metrics thread; a send error is raised by the
logger's next call, and so ends the run as any metrics-thread error does.
"""

from __future__ import annotations

import json
import os
import queue
import re
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ember._rundir.atomic import atomic_write
from ember._rundir.config import flatten_config
from ember.train._logger.base import check_artifacts
from ember.train._metric.values import MetricValue, tracker_points
from ember.train._vocabulary import Split

if TYPE_CHECKING:
    from ember.train._summary import LearnerSummary

__all__ = ["MLflowLogger", "mlflow_name"]

RUN_FILE = "mlflow-run.json"
_BATCH = 1000  # MLflow's most metrics per log_batch call
_PARAMS_PER_BATCH = 100  # and params
_PARAM_LENGTH = 6000
_REFUSED = re.compile(r"[^\w./\- ]+")
_PROBE_SECONDS = 5.0  # how long the write probe waits for a database another process holds


def mlflow_name(name: str) -> str:
    """``name`` as MLflow accepts it: each run of refused characters becomes one ``_``."""
    cleaned = re.sub(r"/{2,}", "/", _REFUSED.sub("_", name)).strip("/")
    parts = ["_" if part in (".", "..") else part for part in cleaned.split("/")]
    return "/".join(parts) or "_"


def _mlflow() -> Any:
    try:
        import mlflow
    except ImportError as error:
        raise ImportError(
            "MLflowLogger needs the mlflow package: pip install ember[mlflow]"
        ) from error
    return mlflow


class MLflowLogger:
    """Logs a run to the MLflow ``experiment`` at ``tracking_uri`` (see the module docstring).

    ``run_name`` names a new MLflow run (MLflow picks one without it). ``artifacts`` chooses
    files the run writes at its end for this logger: ``"model"`` (the best checkpoint's export)
    and ``"curves"`` (the PNG of the curves).
    """

    def __init__(
        self,
        tracking_uri: str | None = None,
        experiment: str = "ember",
        run_name: str | None = None,
        artifacts: Collection[str] = (),
    ) -> None:
        if tracking_uri is not None and not isinstance(tracking_uri, str):
            raise TypeError(f"tracking_uri must be a string, got {type(tracking_uri).__name__}")
        if not isinstance(experiment, str) or not experiment:
            raise ValueError(f"experiment must be a non-empty string, got {experiment!r}")
        self.artifacts = check_artifacts(artifacts)
        self._mlflow = _mlflow()
        self.tracking_uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        self.experiment = experiment
        self.run_name = run_name
        self.run_id: str | None = None
        self._client: Any = None
        self._pending: list[Any] = []
        self._sender: _Sender | None = None
        self._ended = False
        self._failed = False

    def wanted_artifacts(self) -> Collection[str]:
        """The files chosen with ``artifacts`` (see :class:`~ember.extend.Logger`)."""
        return self.artifacts

    def start(self, config: Mapping[str, Any]) -> None:
        """Connect, find or create the experiment and the run, log the params."""
        directory = Path(config["directory"])
        uri = self.tracking_uri or f"sqlite:///{(directory / 'mlflow.db').resolve()}"
        _check_reachable(uri)
        _check_writable(uri)
        client = self._client = self._mlflow.MlflowClient(tracking_uri=uri)
        self.run_id = run_id = self._run(
            client, uri, directory, resumed=config["resume"] is not None
        )
        self._sender = _Sender(client, run_id)
        have = client.get_run(run_id).data.params
        params = [
            self._mlflow.entities.Param(key, value)
            for key, value in _flatten(config).items()
            if key not in have
        ]
        for first in range(0, len(params), _PARAMS_PER_BATCH):
            client.log_batch(run_id, params=params[first : first + _PARAMS_PER_BATCH])

    def _run(self, client: Any, uri: str, directory: Path, *, resumed: bool) -> str:
        """The MLflow run to log to: the one kept in the directory when resuming, else new."""
        record = directory / RUN_FILE
        if resumed and record.is_file():
            kept = json.loads(record.read_text(encoding="utf-8"))
            if kept.get("tracking_uri") == uri:
                client.update_run(kept["run_id"], status="RUNNING")
                return str(kept["run_id"])
        experiment = client.get_experiment_by_name(self.experiment)
        if experiment is None:
            location = None
            if self.tracking_uri is None:  # the default store: artifacts in the run directory
                location = (directory / "mlartifacts").resolve().as_uri()
            experiment_id = client.create_experiment(self.experiment, artifact_location=location)
        else:
            experiment_id = experiment.experiment_id
        run_id = str(client.create_run(experiment_id, run_name=self.run_name).info.run_id)
        text = json.dumps({"tracking_uri": uri, "run_id": run_id, "experiment": self.experiment})
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write(record, (text + "\n").encode("utf-8"))
        return run_id

    def log(self, values: Sequence[MetricValue]) -> None:
        """Buffer each value at its tracker points; send a full batch."""
        timestamp = int(time.time() * 1000)
        metric = self._mlflow.entities.Metric
        for value in values:
            for name, step in tracker_points(value):
                self._pending.append(metric(mlflow_name(name), value.value, timestamp, step))
        if len(self._pending) >= _BATCH:
            self._send()

    def end_split(self, epoch: int, split: Split) -> None:
        """Send what is buffered."""
        self._send()

    def on_error(self, error: BaseException) -> None:
        """Training raised (``on_error``): ``end`` marks the run failed, not finished."""
        self._failed = True

    def end(self, summary: LearnerSummary | None, artifacts: Mapping[str, Path]) -> None:
        """Send the rest, wait for it, log the summary and the artifacts, finish the run
        (``FINISHED``, or ``FAILED`` after :meth:`on_error`)."""
        if self._client is None or self.run_id is None or self._sender is None:
            return
        self._send()
        self._sender.sync()
        if summary is not None:
            self._client.log_text(self.run_id, f"{summary}\n", "summary.txt")
        for path in artifacts.values():
            self._client.log_artifact(self.run_id, str(path))
        self._client.set_terminated(self.run_id, status="FAILED" if self._failed else "FINISHED")
        self._ended = True

    def close(self) -> None:
        """Send what is buffered (the values logged before an error are kept), stop the sending
        thread; a run that did not reach ``end`` (training raised) is marked failed."""
        if self._sender is None:
            return
        sender, self._sender = self._sender, None
        try:
            self._queue_pending(sender)
            sender.stop()
        finally:
            if not self._ended and self.run_id is not None:
                self._client.set_terminated(self.run_id, status="FAILED")

    def _send(self) -> None:
        if self._sender is None:
            return
        self._sender.raise_error()
        self._queue_pending(self._sender)

    def _queue_pending(self, sender: _Sender) -> None:
        if self._pending:
            batch, self._pending = self._pending, []
            for first in range(0, len(batch), _BATCH):
                sender.send(batch[first : first + _BATCH])


class _Sender:
    """Sends metric batches on its own thread (``mlflow-sender``); keeps the first error."""

    def __init__(self, client: Any, run_id: str) -> None:
        self._client = client
        self._run_id = run_id
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="mlflow-sender", daemon=True)
        self._thread.start()

    def send(self, metrics: list[Any]) -> None:
        self._queue.put(metrics)

    def sync(self) -> None:
        """Wait until everything queued was sent; raise a send error."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()
        self.raise_error()

    def raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()
        self.raise_error()

    def _run(self) -> None:
        while True:
            message = self._queue.get()
            if message is None:
                return
            if isinstance(message, threading.Event):
                message.set()
                continue
            if self._error is not None:
                continue  # the run is ending: drop the rest
            try:
                self._client.log_batch(self._run_id, metrics=message)
            except Exception as error:  # raised by the logger's next call
                self._error = error


def _check_reachable(uri: str) -> None:
    """A server URI must answer MLflow's health check within a few seconds."""
    if not uri.startswith(("http://", "https://")):
        return
    import urllib.error  # lazy: http.client and ssl would slow `import ember` down
    import urllib.request

    health = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(health, timeout=5) as response:  # http(s) only
            response.read()
    except (urllib.error.URLError, OSError) as error:
        reason = error.reason if isinstance(error, urllib.error.URLError) else error
        raise ConnectionError(
            f"the MLflow tracking server at {uri!r} is unreachable ({reason}); start it "
            "(mlflow server --host 127.0.0.1 --port 5000), or give MLflowLogger a local store "
            "(tracking_uri='sqlite:///mlflow.db')"
        ) from None


def _check_writable(uri: str) -> None:
    """A local ``sqlite:`` store must take a write within a few seconds.

    MLflow retries a store it cannot open or write for about two minutes, then raises
    sqlalchemy's ``OperationalError`` naming neither the store nor the logger. One write
    transaction, rolled back, asks sqlite itself: a read-only directory or file, a path that is
    not a database, or a database another process holds locked for longer than
    :data:`_PROBE_SECONDS` fails it.
    """
    path = _sqlite_path(uri)
    if path is None:
        return
    import sqlite3  # lazy: only a local store needs it

    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # as MLflow would
        connection = sqlite3.connect(path, timeout=_PROBE_SECONDS, isolation_level=None)
        try:
            connection.execute("BEGIN IMMEDIATE")  # the write lock
            connection.execute("CREATE TABLE ember_write_probe (x)")  # a page written
            connection.execute("ROLLBACK")
        finally:
            connection.close()
    except (sqlite3.Error, OSError) as error:
        raise PermissionError(
            f"MLflowLogger cannot write its tracking store {uri!r} ({error}): make {path.parent} "
            "writable (or free the database), or give MLflowLogger another tracking_uri"
        ) from None


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///path`` URI (relative, or absolute with a fourth
    slash); None for another store, an in-memory database or a ``file:`` URI of sqlite's."""
    if not uri.startswith("sqlite:///"):
        return None
    path, _, query = uri.removeprefix("sqlite:///").partition("?")
    if path in ("", ":memory:") or "uri=true" in query:
        return None
    return Path(path)


def _flatten(config: Mapping[str, Any]) -> dict[str, str]:
    """Dotted keys to the text of each leaf, as MLflow params hold them."""
    return {
        mlflow_name(key): (value if isinstance(value, str) else json.dumps(value))[:_PARAM_LENGTH]
        for key, value in flatten_config(config).items()
    }
