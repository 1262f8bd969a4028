"""MLflowLogger against the real mlflow package: a local store, a resumed run, sanitised names,
an unreachable server, and a real ``mlflow server`` on 127.0.0.1; values read back with
mlflow's own client."""

from __future__ import annotations

import importlib.util
import io
import socket
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
from ember.train._metric.store import EventStore
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


@pytest.mark.slow
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
