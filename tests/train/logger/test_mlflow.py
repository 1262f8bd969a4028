"""MLflowLogger against the real mlflow package: a local store, a resumed run, sanitised names,
an unreachable server, and a real ``mlflow server`` on 127.0.0.1; values read back with
mlflow's own client."""

from __future__ import annotations

import ctypes
import importlib.util
import io
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from ember.extend import MetricEntry, MetricState, NumericEntry
from ember.train import (
    CliMetricsRenderer,
    FileMetricLogger,
    Learner,
    LossMetric,
    MLflowLogger,
    Split,
    SupervisedTraining,
    load_checkpoint,
)
from ember.train._logger.mlflow import RUN_FILE, mlflow_name
from ember.train._logger.store import EventStore
from tests.train.fixtures import TinyRegressor, loader

mlflow = pytest.importorskip(
    "mlflow", reason="MLflowLogger needs mlflow: pip install ember[mlflow]"
)

TRAIN_BATCHES = 3  # 10 items, batch 4

# mlflow's own dependencies (sqlalchemy, pydantic) warn about their APIs it uses: not ember's
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]


def train(directory: Path, logger: MLflowLogger, epochs: int, model: TinyRegressor) -> Any:
    result = (
        SupervisedTraining(directory, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .hparams({"hidden": 3})
        .summary()
        .with_default_checkpointers()
        .resume_latest()
        .with_metric_logger(logger)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), 0.05))
    )
    assert result.error is None, result.traceback
    return result


def history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def test_local_store_params_metrics_artifacts_and_resume(
    model: TinyRegressor, run_dir: Path
) -> None:
    """The default store (sqlite in the run directory): params from the configuration, metrics
    at their steps equal to the file logs, the summary and the files as artifacts (the chosen
    best-checkpoint export and curves PNG included); a resumed run continues the same MLflow
    run, its steps following on."""
    pytest.importorskip("matplotlib")
    logger = MLflowLogger(experiment="tests", run_name="first", artifacts=("model", "curves"))
    train(run_dir, logger, 2, model)
    run_id = logger.run_id
    assert run_id is not None and (run_dir / RUN_FILE).is_file()
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.run_name == "first"
    params = run.data.params
    assert params["num_epochs"] == "2" and params["hparams.hidden"] == "3"
    assert params["optimizer.class"] == "torch.optim.sgd.SGD"
    assert float(params["optimizer.param_groups.0.lr"]) == 0.05
    assert params["train.batch_size"] == "4"

    files = FileMetricLogger(run_dir)
    batches = [  # the batch values: the epoch values are in train/Loss/epoch
        e.value
        for epoch in (1, 2)
        for e in files.read_numeric("Loss", epoch, Split.TRAIN)
        if not e.final
    ]
    assert history(client, run_id, "train/Loss") == list(zip(range(1, 7), batches, strict=True))
    valid_final = files.read_numeric("Loss", 2, Split.VALID)[-1].value
    assert history(client, run_id, "valid/Loss/epoch")[-1] == (2, valid_final)
    assert [s for s, _ in history(client, run_id, "valid/Loss")] == [3, 6]
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"config.json", "summary.json", "summary.txt"} <= artifacts
    assert {"model.safetensors", "metrics.png"} <= artifacts
    downloads = run_dir.parent / "downloads"
    downloads.mkdir()
    exported = load_file(client.download_artifacts(run_id, "model.safetensors", str(downloads)))
    best = load_checkpoint(run_dir, "best", into=TinyRegressor())
    assert all(torch.equal(exported[name], t) for name, t in best.state_dict().items())

    resumed = MLflowLogger(experiment="tests", run_name="ignored on resume")
    train(run_dir, resumed, 4, model)
    assert resumed.run_id == run_id
    steps = [s for s, _ in history(client, run_id, "train/Loss")]
    assert steps == list(range(1, 4 * TRAIN_BATCHES + 1))  # strictly increasing, no duplicate
    assert client.get_run(run_id).data.params["num_epochs"] == "2"  # params never change
    assert client.get_run(run_id).info.status == "FINISHED"


def test_names_mlflow_refuses_are_sanitised(tmp_path: Path) -> None:
    """Refused characters become '_' and the value is still logged."""
    assert mlflow_name("train/Accuracy (%)") == "train/Accuracy _"
    assert mlflow_name("valid/F1@0.5 [macro]") == "valid/F1_0.5 _macro_"
    assert mlflow_name("a//b/../c") == "a/b/_/c"
    uri = f"sqlite:///{(tmp_path / 'm.db').resolve()}"
    logger = MLflowLogger(tracking_uri=uri, experiment="names")
    store = EventStore([logger])
    store.start({"directory": str(tmp_path), "resume": None})
    store.start_split(Split.TRAIN, 1)
    state = MetricState(MetricEntry("Accuracy (%)", "", "75,4"), NumericEntry(75.0, 4))
    store.log(Split.TRAIN, [state], 7)
    store.end_split(Split.TRAIN)
    store.end(None, {})
    store.close()
    client = mlflow.MlflowClient(tracking_uri=uri)
    assert logger.run_id is not None
    assert history(client, logger.run_id, "train/Accuracy _") == [(7, 75.0)]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_unreachable_server_is_an_error_at_launch(model: TinyRegressor, run_dir: Path) -> None:
    """Nothing listens there: launch raises, naming the URI, before training."""
    uri = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ConnectionError, match=f"{uri}.*unreachable"):
        train(run_dir, MLflowLogger(tracking_uri=uri), 1, model)
    assert not (run_dir / "train").exists()


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """A real ``mlflow server`` on 127.0.0.1, stopped after the test."""
    executable = Path(sys.executable).parent / "mlflow"
    if not executable.exists() or importlib.util.find_spec("flask") is None:
        pytest.skip(
            "mlflow server needs the full mlflow package (ember[mlflow]), not mlflow-skinny"
        )
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    command = [str(executable), "server", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}"]
    command += ["--artifacts-destination", str(tmp_path / "artifacts"), "--workers", "1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2):
                    break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"mlflow server did not start (exit code {server.poll()})")
                time.sleep(0.5)  # polling a starting server, not a race
        yield uri
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(290)
def test_a_real_mlflow_server(model: TinyRegressor, run_dir: Path, mlflow_server: str) -> None:
    """Logged over HTTP to a real server, read back with mlflow's client."""
    logger = MLflowLogger(tracking_uri=mlflow_server, experiment="served", run_name="http")
    train(run_dir, logger, 1, model)
    client = mlflow.MlflowClient(tracking_uri=mlflow_server)
    assert logger.run_id is not None
    run = client.get_run(logger.run_id)
    assert run.info.status == "FINISHED" and run.data.params["num_epochs"] == "1"
    assert [s for s, _ in history(client, logger.run_id, "train/Loss")] == [1, 2, 3]
    assert "summary.json" in {a.path for a in client.list_artifacts(logger.run_id)}


class FailingRegressor(TinyRegressor):
    """Its third training step raises, inside the first epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.steps = 0

    def train_step(self, batch: Any) -> Any:
        self.steps += 1
        if self.steps == 3:
            raise RuntimeError("the third step failed")
        return super().train_step(batch)


def test_a_run_whose_training_raised_is_marked_failed(run_dir: Path) -> None:
    """Issue 29, item 9: training raised, so the MLflow run is FAILED (it was marked FINISHED,
    as a run that ended well), with the metrics logged before the error."""
    logger = MLflowLogger(experiment="failing")
    model = FailingRegressor()
    result = (
        SupervisedTraining(run_dir, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .num_epochs(2)
        .with_metric_logger(logger)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .errors_in_result()
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), 0.05))
    )
    assert isinstance(result.error, RuntimeError)
    assert logger.run_id is not None
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{(run_dir / 'mlflow.db').resolve()}")
    assert client.get_run(logger.run_id).info.status == "FAILED"
    assert [s for s, _ in history(client, logger.run_id, "train/Loss")] == [1, 2]


CHILD = """
import io, json, sys
from pathlib import Path
import torch
from ember.train import CliMetricsRenderer, Learner, LossMetric, MLflowLogger, SupervisedTraining
from tests.train.fixtures import TinyRegressor, loader

model = TinyRegressor()
try:
    (SupervisedTraining(Path(sys.argv[1]), loader(10), loader(6))
     .metrics(LossMetric())
     .with_metric_logger(MLflowLogger(tracking_uri=sys.argv[2]))
     .renderer(CliMetricsRenderer(io.StringIO()))
     .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), 0.05)))
except Exception as error:
    print(json.dumps([type(error).__name__, str(error)]))
"""


def without_root_overrides() -> None:
    """In the child, before exec: drop the capabilities that let root write into a read-only
    directory (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER), so it meets the directory's
    mode as any user does."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


@pytest.mark.parametrize("existing", [False, True], ids=["new store", "existing store"])
def test_a_store_in_a_read_only_directory_is_refused_at_launch_in_seconds(
    tmp_path: Path, existing: bool
) -> None:
    """Issue 29, item 9: an sqlite store in a read-only directory (new, or an existing database
    there) stops the launch before training with an error naming the URI and the logger, well
    within the subprocess's 90 s (MLflow's own retries took 127-138 s, then raised sqlalchemy's
    OperationalError). The real mlflow package and sqlite; as root, the child runs without the
    capabilities that ignore file modes."""
    store = tmp_path / "store"
    store.mkdir()
    if existing:
        sqlite3.connect(store / "mlflow.db").close()  # an empty database, as a first run leaves
        (store / "mlflow.db").chmod(0o644)
    store.chmod(0o555)
    tmp_path.chmod(0o755)
    uri = f"sqlite:///{store / 'mlflow.db'}"
    root = os.geteuid() == 0
    try:
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path / "run"), uri],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            cwd=Path(__file__).parents[3],
            preexec_fn=without_root_overrides if root else None,
        )
    finally:
        store.chmod(0o755)
    if root and "prctl" in done.stderr:
        pytest.skip("cannot drop root's capabilities here, so no directory is read-only to it")
    assert done.returncode == 0, done.stderr
    kind, message = json.loads(done.stdout.strip().splitlines()[-1])
    assert kind == "PermissionError"
    assert f"MLflowLogger cannot write its tracking store {uri!r}" in message
    assert f"make {store} writable" in message
    assert not (tmp_path / "run" / "train").exists()
