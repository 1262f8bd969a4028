"""The run directory: one writer at a time (its lock), never two runs mixed in it."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ember import RunDirectoryError
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from ember.train._directory import LOCK, claim_directory
from tests.train.fixtures import TinyRegressor, loader


def training(directory: Path, epochs: int = 2) -> SupervisedTraining:
    return (
        SupervisedTraining(directory, loader(8), loader(4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .with_default_checkpointers()
    )


def learner() -> Learner[TinyRegressor]:
    torch.manual_seed(0)
    model = TinyRegressor()
    return Learner(model, torch.optim.SGD(model.parameters()), 0.1)


def test_a_second_fresh_run_into_a_used_directory_is_refused(run_dir: Path) -> None:
    """The user's mistake: running the script twice into one directory (the old run's epoch-3
    files would stay beside the new run's two epochs). Refused before anything is written."""
    training(run_dir, epochs=3).launch(learner())
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    with pytest.raises(RunDirectoryError) as raised:
        training(run_dir, epochs=2).launch(learner())
    message = str(raised.value)
    assert str(run_dir) in message and "another run's logs or checkpoints" in message
    assert "checkpoint/ (" in message and "train" in message and "valid" in message
    assert "resume_latest()" in message and "new directory" in message
    assert "overwrite()" in message
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before  # untouched
    assert not (run_dir / LOCK).exists()


def test_overwrite_removes_only_what_ember_wrote(run_dir: Path) -> None:
    """overwrite() starts afresh: the old run's epoch 3 is gone, the user's own files stay."""
    training(run_dir, epochs=3).launch(learner())
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "data").mkdir()
    (run_dir / "checkpoint" / "my-export.pt").write_text("mine too")
    result = training(run_dir, epochs=2).overwrite().launch(learner())
    assert result.last_epoch == 2
    assert sorted(p.name for p in (run_dir / "train").iterdir()) == [
        "epoch-1",
        "epoch-2",
        "steps.jsonl",
    ]
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert (run_dir / "data").is_dir()
    assert (run_dir / "checkpoint" / "my-export.pt").read_text() == "mine too"
    assert not (run_dir / "checkpoint" / "manifest-3.json").exists()


def test_a_sharded_run_s_files_and_the_best_export_count_as_ember_s(run_dir: Path) -> None:
    """An FSDP run's shard files mark the directory as used, and overwrite() removes them and
    the best epoch's export; a user's safetensors file of another name stays."""
    run_dir.mkdir()
    (run_dir / "checkpoint").mkdir()
    (run_dir / "checkpoint" / "shards-rank1-2.safetensors").write_bytes(b"x")
    (run_dir / "model.safetensors").write_bytes(b"x")
    (run_dir / "checkpoint" / "mine.safetensors").write_bytes(b"mine")
    with pytest.raises(RunDirectoryError, match=r"checkpoint/ \(1 checkpoint files\)"):
        training(run_dir, epochs=1).launch(learner())
    training(run_dir, epochs=1).overwrite().launch(learner())
    assert not (run_dir / "checkpoint" / "shards-rank1-2.safetensors").exists()
    assert not (run_dir / "model.safetensors").exists()
    assert (run_dir / "checkpoint" / "mine.safetensors").read_bytes() == b"mine"


def test_overwrite_with_a_resume_is_refused(run_dir: Path) -> None:
    """overwrite() and resume_latest() contradict each other: the message says to drop one."""
    with pytest.raises(ValueError, match=r"overwrite\(\) starts the run afresh.*drop one"):
        training(run_dir).overwrite().resume_latest().launch(learner())


def test_a_directory_with_unrelated_files_is_not_a_run(run_dir: Path) -> None:
    """A directory holding only the user's files is not refused, and they are kept."""
    run_dir.mkdir()
    (run_dir / "README").write_text("my experiment")
    assert training(run_dir, epochs=1).launch(learner()).last_epoch == 1
    assert (run_dir / "README").read_text() == "my experiment"


def test_a_launch_refused_before_training_leaves_no_directory(tmp_path: Path) -> None:
    """The claim made the directory; a refused launch removes it again (nothing written)."""
    directory = tmp_path / "never"
    with pytest.raises(ValueError, match="resuming needs checkpointers"):
        SupervisedTraining(directory, loader(8), loader(4)).checkpoint(1).launch(learner())
    assert not directory.exists()


def write_lock(directory: Path, pid: int, host: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    holder = {"pid": pid, "host": host, "started": "2026-12-01T20:00:00+00:00"}
    (directory / LOCK).write_text(json.dumps(holder))


def test_a_second_writer_is_refused_with_the_holders_pid_and_host(run_dir: Path) -> None:
    """The user's mistake: restarting a run while the old workers still write the directory."""
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(run_dir, holder.pid, socket.gethostname())
        with pytest.raises(RunDirectoryError) as raised:
            training(run_dir).launch(learner())
    finally:
        holder.kill()
        holder.wait(timeout=30)
    message = str(raised.value)
    assert f"pid {holder.pid} on this host" in message
    assert "another process writes this run directory" in message
    assert "wait for it to end or stop it, or use another directory" in message
    assert json.loads((run_dir / LOCK).read_text())["pid"] == holder.pid  # theirs: kept
    assert not (run_dir / "train").exists()


def test_a_lock_of_another_host_is_refused_naming_the_host(run_dir: Path) -> None:
    write_lock(run_dir, 4242, "node-17")
    with pytest.raises(RunDirectoryError, match=r"pid 4242 on host 'node-17'.*delete the lock"):
        training(run_dir).launch(learner())


def test_a_stale_lock_of_a_dead_process_is_taken_over_with_a_warning(run_dir: Path) -> None:
    """A run killed with SIGKILL leaves its lock; the next run takes it over and says so."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    write_lock(run_dir, dead.pid, socket.gethostname())
    with pytest.warns(RuntimeWarning, match=rf"taking over the lock .* of pid {dead.pid}"):
        result = training(run_dir, epochs=1).launch(learner())
    assert result.last_epoch == 1
    assert not (run_dir / LOCK).exists()  # released at the end


def test_the_lock_is_held_during_the_run_and_released_after_an_error(run_dir: Path) -> None:
    """While training, the lock names this process; a failed run still releases it."""
    seen: list[dict[str, object]] = []
    model = TinyRegressor()

    def look(batch: object) -> None:
        seen.append(json.loads((run_dir / LOCK).read_text()))
        raise RuntimeError("boom")

    model.on_train_step = look
    with pytest.raises(Exception, match="with the RuntimeError") as raised:
        training(run_dir).launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert str(raised.value.__cause__) == "boom"
    assert seen[0]["pid"] == os.getpid() and seen[0]["host"] == socket.gethostname()
    assert not (run_dir / LOCK).exists()


def test_the_lock_is_taken_with_o_excl(tmp_path: Path) -> None:
    """Two claims of one directory in one process: the second is refused (O_EXCL)."""
    with (
        claim_directory(tmp_path, fresh=False, overwrite=False, checkpoints=None),
        pytest.raises(RunDirectoryError, match=f"pid {os.getpid()} on this host"),
        claim_directory(tmp_path, fresh=False, overwrite=False, checkpoints=None),
    ):
        pass
    assert not (tmp_path / LOCK).exists()


def test_under_ddp_only_rank_0_claims_the_directory(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank > 0 writes nothing, so it takes no lock and checks nothing (rank 0 does)."""
    from ember.train import DistributedDataParallel
    from ember.train._directory import claim_for_run

    write_lock(run_dir, 4242, "node-17")  # would refuse rank 0
    monkeypatch.setenv("RANK", "1")
    config = training(run_dir).with_training_strategy(DistributedDataParallel()).config
    with claim_for_run(config):
        assert json.loads((run_dir / LOCK).read_text())["pid"] == 4242  # untouched
    monkeypatch.setenv("RANK", "0")
    with (
        pytest.raises(RunDirectoryError, match="pid 4242 on host 'node-17'"),
        claim_for_run(config),
    ):
        pass


def test_overwrite_keeps_the_user_s_files_inside_the_split_directories(run_dir: Path) -> None:
    """The user's mistake (issue 29, item 6): notes and data kept inside train/ and valid/, then
    overwrite(). ember's logs go, the user's files stay (and the directories that hold them)."""
    training(run_dir, epochs=3).launch(learner())
    (run_dir / "train" / "notes.md").write_text("lr 0.1 diverged")
    (run_dir / "train" / "epoch-3" / "plot.png").write_bytes(b"mine")
    (run_dir / "valid" / "labels").mkdir()
    (run_dir / "valid" / "labels" / "extra.log").write_text("not a metric log")
    (run_dir / "test").mkdir()
    (run_dir / "test" / "images.txt").write_text("my test set")
    result = training(run_dir, epochs=2).overwrite().launch(learner())
    assert result.last_epoch == 2
    assert (run_dir / "train" / "notes.md").read_text() == "lr 0.1 diverged"
    assert (run_dir / "train" / "epoch-3" / "plot.png").read_bytes() == b"mine"
    assert not (run_dir / "train" / "epoch-3" / "Loss.log").exists()  # the old epoch's log
    assert (run_dir / "valid" / "labels" / "extra.log").read_text() == "not a metric log"
    assert (run_dir / "test" / "images.txt").read_text() == "my test set"
    assert not (run_dir / "valid" / "epoch-3").exists()
    assert (run_dir / "train" / "epoch-2" / "Loss.log").is_file()  # the new run's


def test_split_directories_of_the_user_s_alone_are_not_a_run(run_dir: Path) -> None:
    """A directory whose train/ holds only the user's files is not taken for an earlier run."""
    (run_dir / "train").mkdir(parents=True)
    (run_dir / "train" / "images.txt").write_text("data")
    assert training(run_dir, epochs=1).launch(learner()).last_epoch == 1
    assert (run_dir / "train" / "images.txt").read_text() == "data"


def test_a_versioned_run_takes_the_next_version_and_a_resume_the_newest(tmp_path: Path) -> None:
    """The same launch, run again unchanged (a notebook cell), goes to version_0, version_1...;
    resume_latest() goes on in the newest; the guard against mixing runs stays."""
    runs = tmp_path / "runs"
    first = training(runs, epochs=1).versioned().launch(learner())
    second = training(runs, epochs=1).versioned().launch(learner())
    assert (first.directory, second.directory) == (runs / "version_0", runs / "version_1")
    assert (runs / "version_1" / "experiment.log").is_file()
    assert not (runs / "experiment.log").exists()
    resumed = training(runs, epochs=3).versioned().resume_latest().launch(learner())
    assert resumed.directory == runs / "version_1" and resumed.last_epoch == 3
    assert sorted(p.name for p in (runs / "version_1" / "train").iterdir()) == [
        "epoch-1",
        "epoch-2",
        "epoch-3",
        "steps.jsonl",
    ]
    assert sorted(p.name for p in runs.iterdir()) == ["version_0", "version_1"]
    with pytest.raises(RunDirectoryError, match="another run's logs"):
        training(runs / "version_1", epochs=1).launch(learner())


def test_a_resume_with_no_version_yet_starts_version_0(tmp_path: Path) -> None:
    """The first run of a notebook that always resumes: version_0, from epoch 1."""
    result = training(tmp_path / "runs", epochs=1).versioned().resume_latest().launch(learner())
    assert result.directory == tmp_path / "runs" / "version_0" and result.last_epoch == 1


def test_a_refused_versioned_launch_leaves_no_directory(tmp_path: Path) -> None:
    """The version and the parent the claim made are removed again when launch refuses."""
    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match="resuming needs checkpointers"):
        SupervisedTraining(runs, loader(8), loader(4)).versioned().checkpoint(1).launch(learner())
    assert not runs.exists()


def test_versioned_with_what_contradicts_it_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """overwrite(), a checkpointer with its own directory, several processes: each refused at
    launch with the reason and the fix, before anything is written."""
    from ember.train import KeepLastNCheckpoints, LearningCheckpointer

    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match=r"overwrite\(\) has nothing to remove"):
        training(runs).versioned().overwrite().launch(learner())
    own = LearningCheckpointer(tmp_path / "ckpt", KeepLastNCheckpoints(1))
    with pytest.raises(ValueError, match=r"with_checkpointers\(\) writes .*ckpt.*default"):
        training(runs).with_checkpointers(own).versioned().launch(learner())
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"this job has 2 \(WORLD_SIZE\)"):
        training(runs).versioned().launch(learner())
    assert not runs.exists()
