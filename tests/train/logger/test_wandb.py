"""WandbLogger against the real wandb package in offline mode (nothing leaves the machine): what
it wrote is read back from the offline run's transaction log and files; a resumed run continues
the same W&B run with no step twice; failures are named at launch; nothing of W&B outlives
``launch``."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.runs import load
from ember.train import Learner, LossMetric, WandbLogger
from tests.train.fixtures import TinyRegressor, ember_threads, loader, quiet

wandb = pytest.importorskip("wandb", reason="WandbLogger needs wandb: pip install ember[wandb]")
from wandb.proto import wandb_internal_pb2  # noqa: E402  # only with wandb installed

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """W&B offline, silent, with its own directories in the test's: it never tries the network
    and writes nothing outside the test."""
    for name in [name for name in os.environ if name.startswith("WANDB_")]:
        monkeypatch.delenv(name)
    home = tmp_path / "wandb-home"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    monkeypatch.setenv("WANDB_X_DISABLE_STATS", "true")
    monkeypatch.setenv("WANDB_X_SAVE_REQUIREMENTS", "false")
    for variable, folder in (("CONFIG", "config"), ("CACHE", "cache"), ("DATA", "data")):
        monkeypatch.setenv(f"WANDB_{variable}_DIR", str(home / folder))


def records(path: Path) -> Iterator[Any]:
    """The records of a ``.wandb`` transaction log. wandb (0.2x+) reads it in its Go core and
    ships no Python reader; the format is LevelDB's log (a 7-byte header ``:W&B``, 0xBEE1,
    version 0; 32 KiB blocks of ``crc32c, length, type`` chunks: full, first, middle, last)
    holding ``wandb_internal_pb2.Record`` messages."""
    data = path.read_bytes()
    assert data[:4] == b":W&B" and struct.unpack("<HB", data[4:7]) == (0xBEE1, 0)
    offset, block, pending = 7, 32768, b""
    while offset + 7 <= len(data):
        if block - offset % block < 7:  # a block's tail too short for a header: padding
            offset += block - offset % block
            continue
        _, length, kind = struct.unpack("<IHB", data[offset : offset + 7])
        chunk = data[offset + 7 : offset + 7 + length]
        offset += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):  # full, or the last chunk of a record
            record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]
            record.ParseFromString(pending)
            yield record


def offline_runs(directory: Path) -> list[Path]:
    return sorted((directory / "wandb").glob("offline-run-*"))


def run_id(run: Path) -> str:
    """The W&B run id an offline run's transaction log records."""
    for record in records(next(run.glob("run-*.wandb"))):
        if record.WhichOneof("record_type") == "run":
            return str(record.run.run_id)
    raise AssertionError(f"no run record in {run}")


def history(run: Path) -> list[tuple[int, dict[str, Any]]]:
    """Each history row of an offline run: its W&B step and its values."""
    rows = []
    for record in records(next(run.glob("run-*.wandb"))):
        if record.WhichOneof("record_type") == "history":
            items = {
                "/".join(item.nested_key) or item.key: json.loads(item.value_json)
                for item in record.history.item
            }
            rows.append((record.history.step.num, items))
    return rows


def train(directory: Path, logger: WandbLogger, *, epochs: int = 2, resume: bool = False,
          stop_at_batch: int | None = None) -> Any:  # fmt: skip
    torch.manual_seed(0)
    model = TinyRegressor()
    builder = (
        quiet(directory, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .summary()
        .with_default_checkpointers()
        .hparams({"hidden": 3})
        .with_metric_logger(logger)
    )
    if resume:
        builder = builder.resume_latest()
    if stop_at_batch is not None:
        interrupter, batches = builder.interrupter(), iter(range(1, 1000))
        model.on_train_step = lambda _: (
            interrupter.stop("stopped by the test") if next(batches) == stop_at_batch else None
        )
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    assert result.error is None, result.traceback
    return result


def wandb_processes() -> list[str]:
    """This process's children that are W&B's (its service, wandb-core)."""
    listing = subprocess.run(
        ["ps", "--ppid", str(os.getpid()), "-o", "comm="], capture_output=True, text=True
    ).stdout
    return [name for name in listing.split() if "wandb" in name]


def test_a_run_is_logged_offline_and_reads_back(tmp_path: Path) -> None:
    """Config as the run's config; train/Loss at every global step, valid/Loss at the step it
    followed, the epoch values with their epoch; summary and files saved, the model as an
    artifact; W&B's service and threads gone after launch."""
    directory = tmp_path / "run"
    logger = WandbLogger(project="ember-tests", artifacts=("model", "curves"))
    train(directory, logger)
    assert wandb_processes() == [] and ember_threads() == []
    assert not [t.name for t in threading.enumerate() if "wandb" in t.name.lower()]
    (run,) = offline_runs(directory)
    record = json.loads((directory / "wandb-run.json").read_text())
    assert run.name.endswith(record["id"]) and record["logged"] == {
        "step": 6,
        "train": 2,
        "valid": 2,
    }
    kinds = [r.WhichOneof("record_type") for r in records(next(run.glob("*.wandb")))]
    assert "artifact" in kinds and "exit" in kinds
    config = {}
    for r in records(next(run.glob("*.wandb"))):
        if r.WhichOneof("record_type") == "run":  # the run's config, as wandb.init got it
            config.update({item.key: json.loads(item.value_json) for item in r.run.config.update})
    del config["_wandb"]
    assert config == json.loads((directory / "config.json").read_text())
    rows = history(run)
    ember_run = load(directory)
    train_rows = [r for r in ember_run.rows("item") if r.split == "train"]
    assert [(step, row["train/Loss"]) for step, row in rows if "train/Loss" in row] == [
        (r.step, r.value) for r in train_rows
    ]
    epochs = {(r.split, r.epoch): (r.step, r.value) for r in ember_run.rows()}
    for (split, epoch), (step, value) in epochs.items():
        (row,) = [row for s, row in rows if f"{split}/Loss/epoch" in row and row["epoch"] == epoch]
        assert row[f"{split}/Loss/epoch"] == value
        if split == "valid":
            assert (step, value) in [(s, r["valid/Loss"]) for s, r in rows if "valid/Loss" in r]
    saved = {path.name for path in (run / "files").iterdir()}
    assert {"config.json", "summary.json", "summary.txt", "metrics.png"} <= saved
    assert "Total Epochs: 2" in (run / "files" / "summary.txt").read_text()


def test_a_resumed_run_continues_the_same_wandb_run_without_a_step_twice(tmp_path: Path) -> None:
    """Stopped in epoch 2 (a mid-round checkpoint) and resumed to epoch 3: both launches log to
    the same W&B run id; together they hold every global step of train/Loss once, with the
    values of the file logs, and each epoch value once (the stopped split's partial one not)."""
    directory = tmp_path / "run"
    train(directory, WandbLogger(project="ember-tests"), epochs=3, stop_at_batch=5)
    train(directory, WandbLogger(project="ember-tests"), epochs=3, resume=True)
    first, second = offline_runs(directory)
    assert (
        run_id(first)
        == run_id(second)
        == json.loads((directory / "wandb-run.json").read_text())["id"]
    )
    rows = history(first) + history(second)
    steps = [(step, row["train/Loss"]) for step, row in rows if "train/Loss" in row]
    train_rows = [r for r in load(directory).rows("item") if r.split == "train"]
    assert steps == [(r.step, r.value) for r in train_rows]
    assert [s for s, _ in steps] == list(range(1, 10))
    epochs = sorted(row["epoch"] for _, row in rows if "train/Loss/epoch" in row)
    assert epochs == [1, 2, 3]
    assert wandb_processes() == []


def test_failures_are_named_at_launch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory W&B cannot write, a wandb.init that fails: the launch stops before training
    with a message naming W&B and the cause; no W&B process is left."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError, match="W&B cannot write its files in"):
        train(tmp_path / "run", WandbLogger(project="p", directory=blocker / "wandb"))
    with pytest.raises(RuntimeError, match=r"W&B could not start the run \(wandb.init: "):
        train(tmp_path / "run2", WandbLogger(project="bad/project"))
    assert not (tmp_path / "run2" / "train").exists()
    assert wandb_processes() == []
    with pytest.raises(ValueError, match="mode must be"):
        WandbLogger(mode="online-ish")
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(ImportError, match=r"pip install ember\[wandb\]"):
        WandbLogger()
