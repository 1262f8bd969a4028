"""resume_latest() with damaged checkpoints: reported, refused when none is usable, a fresh run
only when asked; hostile values in a checkpoint are CheckpointErrors naming it; the checkpoint a
run resumes from read and verified once."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

from ember import CheckpointError
from ember._rundir.checkpoints import RECORDS
from ember._rundir.manifest import manifest_path, read_manifest, write_manifest
from ember.extend import Record
from ember.train import (
    CliMetricsRenderer,
    FileCheckpointer,
    KeepLastNCheckpoints,
    Learner,
    LearningResult,
    SupervisedTraining,
)
from tests.train.fixtures import TinyRegressor, ember_threads, loader

pytestmark = pytest.mark.timeout(120)

_RECORDING: list[list[str]] = []
"""The file lists of the :func:`opened_files` blocks running (none: the audit hook is idle)."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event == "open" and _RECORDING and isinstance(args[0], str | bytes | os.PathLike):
        _RECORDING[-1].append(os.fsdecode(args[0]))


sys.addaudithook(_audit)  # a hook cannot be removed: it records only inside opened_files()


@contextmanager
def opened_files() -> Iterator[list[str]]:
    """The path of every file opened while the block runs, on any thread, as Python's ``open``
    audit event reports it (``open()``, ``Path.open``, ``os.open``): no function is patched."""
    opened: list[str] = []
    _RECORDING.append(opened)
    try:
        yield opened
    finally:
        _RECORDING.remove(opened)


def builder(run: Path, stream: io.StringIO | None = None) -> SupervisedTraining:
    return (
        SupervisedTraining(run, loader(8, 4), loader(4, 4))
        .renderer(CliMetricsRenderer(stream or io.StringIO()))
        .with_default_checkpointers()
        .with_checkpointing_strategy(KeepLastNCheckpoints(5))
    )


def train(configured: SupervisedTraining) -> LearningResult[TinyRegressor]:
    torch.manual_seed(0)
    model = TinyRegressor()
    return configured.errors_in_result().launch(
        Learner(model, torch.optim.SGD(model.parameters()), 1e-2)
    )


def checkpointed_run(tmp_path: Path, epochs: int = 3) -> Path:
    run = tmp_path / "run"
    assert train(builder(run).num_epochs(epochs)).error is None
    return run


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])


def snapshot(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def test_damaged_newest_checkpoint_is_skipped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, threads_before: set[threading.Thread]
) -> None:
    """Epoch 3 is truncated: the run resumes after epoch 2 and says, in the log, in
    experiment.log and on the renderer, which file is damaged and that epoch 3 is trained and
    written again."""
    run = checkpointed_run(tmp_path)
    model_3 = run / "checkpoint" / "model-3.safetensors"
    truncate(model_3)
    stream = io.StringIO()
    with caplog.at_level(logging.WARNING, logger="ember"):
        result = train(builder(run, stream).num_epochs(4).resume_latest())
    assert result.error is None
    assert "(resuming at epoch 3)" in stream.getvalue()
    expected = (
        f"resume_latest() skips the checkpoint of epoch 3: checkpoint file {model_3} is "
        "damaged: its size is 100 bytes"
    )
    assert any(r.getMessage().startswith(expected) for r in caplog.records)
    assert "this run trains epoch 3 again and overwrites that checkpoint" in caplog.text
    assert expected in (run / "experiment.log").read_text()
    assert f"Warning: {expected}" in stream.getvalue()  # the CLI renderer's on_warning
    assert ember_threads(since=threads_before) == []


def test_no_usable_checkpoint_refuses_to_start_and_keeps_them(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """Every checkpoint damaged (one truncated, one nested 100,000 deep, one missing a file):
    launch refuses before training, naming each, and leaves every file as it was."""
    run = checkpointed_run(tmp_path)
    checkpoints = run / "checkpoint"
    truncate(checkpoints / "model-3.safetensors")
    manifest_path(checkpoints, 2).write_text("[" * 100_000 + "]" * 100_000)
    (checkpoints / "optim-1.safetensors").unlink()
    before = snapshot(checkpoints)
    with pytest.raises(CheckpointError) as info:
        train(builder(run).num_epochs(4).resume_latest())
    message = str(info.value)
    assert message.startswith(f"resume_latest() found checkpoints in {checkpoints} but none is")
    assert f"epoch 1: checkpoint file {checkpoints / 'optim-1.safetensors'}" in message
    assert "epoch 2: checkpoint manifest" in message and "nested too deeply" in message
    assert "epoch 3: checkpoint file" in message and "is damaged" in message
    assert "resume_latest(fresh_if_unusable=True)" in message
    assert snapshot(checkpoints) == before
    assert ember_threads(since=threads_before) == []


def test_fresh_if_unusable_trains_from_epoch_1_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = checkpointed_run(tmp_path, epochs=1)
    truncate(run / "checkpoint" / "model-1.safetensors")
    with caplog.at_level(logging.WARNING, logger="ember"):
        result = train(builder(run).num_epochs(1).resume_latest(fresh_if_unusable=True))
    assert result.error is None
    assert "this run trains epoch 1 again and overwrites that checkpoint" in caplog.text
    assert "no checkpoint in" in caplog.text and "training starts at epoch 1" in caplog.text
    assert read_manifest(run / "checkpoint", 1).epoch == 1  # written anew, complete


def test_fresh_if_unusable_must_be_a_bool(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"fresh_if_unusable must be a bool, got 1 \(int\)"):
        builder(tmp_path).resume_latest(fresh_if_unusable=1)  # type: ignore[arg-type]


def test_python_rng_words_of_2_70_are_a_checkpoint_error(
    tmp_path: Path, threads_before: set[threading.Thread]
) -> None:
    """The state file's Python RNG words edited to 2**70 (manifest updated to match): resuming
    fails with a CheckpointError naming the state file, not an OverflowError."""
    run = checkpointed_run(tmp_path, epochs=1)
    checkpoints = run / "checkpoint"
    state = FileCheckpointer(checkpoints, "state")
    record = state.restore(1)
    metadata = dict(record.metadata)
    metadata["rng"] = dict(metadata["rng"])
    metadata["rng"]["python"] = {**metadata["rng"]["python"], "state": [2**70] * 625}
    written = state.save(1, Record(record.tensors, metadata))
    files = [f if f.name != written.name else written for f in read_manifest(checkpoints, 1).files]
    write_manifest(checkpoints, 1, files)
    result = train(builder(run).num_epochs(2).checkpoint(1))
    assert isinstance(result.error, CheckpointError)
    assert str(result.error).startswith(
        f"the state file of epoch 1 in {checkpoints} holds a malformed RNG state: ValueError"
    )
    assert ember_threads(since=threads_before) == []


@pytest.mark.parametrize("resume", ["latest", "epoch"])
def test_a_resume_reads_and_verifies_its_checkpoint_once(tmp_path: Path, resume: str) -> None:
    """Resuming from epoch 1 (resume_latest() or checkpoint(1)) opens its manifest and each of
    its files once: choosing the checkpoint read and verified them, and the restore parses the
    bytes read then (no second read of the manifest, no second hash of a file)."""
    run = checkpointed_run(tmp_path, epochs=1)
    configured = builder(run).num_epochs(2)
    configured = configured.resume_latest() if resume == "latest" else configured.checkpoint(1)
    with opened_files() as opened:
        result = train(configured)
    assert result.error is None and result.last_epoch == 2
    names = Counter(Path(path).name for path in opened)
    files = ["manifest-1.json", *(f"{name}-1.safetensors" for name in RECORDS)]
    assert {name: names[name] for name in files} == dict.fromkeys(files, 1)
