"""The run directory: one writer at a time (its lock), never two runs mixed in it."""

from __future__ import annotations

import io
import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import torch

from ember import RunDirectoryError
from ember._rundir.layout import LOCK
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from ember.train._directory import claim_for_run, claim_new, siblings, versions
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


def tree(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory``, by relative path, with its bytes."""
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_running_the_script_twice_puts_the_second_run_beside_the_first(run_dir: Path) -> None:
    """The newcomer's case (issue 41): the first example run twice in a row, unchanged. The
    second run goes to run-2, says so, and the first run's files stay byte for byte."""
    training(run_dir, epochs=3).launch(learner())
    first = tree(run_dir)
    stream = io.StringIO()
    again = training(run_dir, epochs=2).renderer(CliMetricsRenderer(stream)).launch(learner())
    second = run_dir.with_name("run-2")
    assert again.directory == second and again.last_epoch == 2 and again.error is None
    assert tree(run_dir) == first  # untouched: not a byte, not a file more
    assert stream.getvalue().splitlines()[0] == f"Run directory: {second}"
    assert sorted(p.name for p in (second / "train").iterdir()) == [
        "epoch-1",
        "epoch-2",
        "steps.jsonl",
    ]
    assert (second / "checkpoint" / "manifest-2.json").is_file()
    log = (second / "experiment.log").read_text()
    assert f"Run directory: {second} ({run_dir} holds an earlier run, left as it is)" in log
    assert not (second / LOCK).exists() and not (run_dir / LOCK).exists()
    third = training(run_dir, epochs=1).launch(learner())
    assert third.directory == run_dir.with_name("run-3")
    assert tree(run_dir) == first


SCRIPT = """
import sys

import torch
from torch import nn

from ember import DataLoaderBuilder, InMemDataset, Learner, LossMetric, SupervisedTraining

torch.manual_seed(0)
data = [(torch.randn(4), torch.randn(1)) for _ in range(24)]
train = DataLoaderBuilder().batch_size(8).build(InMemDataset(data[:16]))
valid = DataLoaderBuilder().batch_size(8).build(InMemDataset(data[16:]))
model = nn.Linear(4, 1)
learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=nn.MSELoss())
result = SupervisedTraining(sys.argv[1], train, valid).metrics(LossMetric()).launch(learner)
print("wrote", result.directory)
"""


def test_a_script_runs_twice_in_a_row_unchanged(tmp_path: Path) -> None:
    """The quick start's case, as a newcomer runs it: the same script, twice, in two processes.
    Both succeed; the second says where it wrote; the first run's files stay byte for byte."""
    script, directory = tmp_path / "first.py", tmp_path / "artifacts" / "run"
    script.write_text(SCRIPT)
    env = {**os.environ, "EMBER_RENDERER": "cli"}

    def run() -> str:
        done = subprocess.run(
            [sys.executable, str(script), str(directory)],
            capture_output=True,
            text=True,
            env=env,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert f"Run directory: {directory}\n" in run()
    first = tree(directory)
    second = directory.with_name("run-2")
    output = run()
    assert f"Run directory: {second}\n" in output and f"wrote {second}\n" in output
    assert tree(directory) == first
    assert (second / "valid" / "epoch-1" / "Loss.log").is_file()


def test_exact_directory_refuses_a_second_fresh_run_into_a_used_directory(run_dir: Path) -> None:
    """exact_directory() keeps the strict refusal (a pipeline whose next step reads the
    directory): refused before anything is written, naming what is there and the choices."""
    training(run_dir, epochs=3).launch(learner())
    before = tree(run_dir)
    with pytest.raises(RunDirectoryError) as raised:
        training(run_dir, epochs=2).exact_directory().launch(learner())
    message = str(raised.value)
    assert str(run_dir) in message and "another run's logs or checkpoints" in message
    assert "checkpoint/ (" in message and "train" in message and "valid" in message
    assert "config.json" in message and "run-end.json" in message
    assert "exact_directory() keeps this run there" in message
    assert "resume_latest()" in message and "drop exact_directory()" in message
    assert "overwrite()" in message
    assert tree(run_dir) == before  # untouched
    assert not run_dir.with_name("run-2").exists()


def test_a_run_still_running_is_refused_not_moved_beside(run_dir: Path) -> None:
    """A second launch while the first still writes the directory (its lock held by a live
    process) is refused naming the holder: it is the same run started twice, not a rerun."""
    training(run_dir, epochs=1).launch(learner())
    before = tree(run_dir)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_lock(run_dir, holder.pid, socket.gethostname())
        with pytest.raises(RunDirectoryError, match=f"pid {holder.pid} on this host"):
            training(run_dir, epochs=1).launch(learner())
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert not run_dir.with_name("run-2").exists()
    (run_dir / LOCK).unlink()
    assert tree(run_dir) == before


def test_a_run_without_file_logs_or_checkpoints_is_still_a_run(run_dir: Path) -> None:
    """A run that wrote only config.json and run-end.json (no file logs, no checkpointers) is
    an earlier run too: the rerun goes beside it and leaves those files as they were."""
    from ember.train import InMemoryMetricLogger

    def bare() -> SupervisedTraining:
        return (
            SupervisedTraining(run_dir, loader(8), loader(4))
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metrics(LossMetric())
            .with_metric_logger(InMemoryMetricLogger())
            .without_file_logs()
        )

    bare().launch(learner())
    before = tree(run_dir)
    assert {"config.json", "run-end.json"} <= set(before)
    assert bare().launch(learner()).directory == run_dir.with_name("run-2")
    assert tree(run_dir) == before


def test_a_used_directory_that_cannot_be_left_is_refused(
    tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpointer with its own directory (every run writes it) or a job of several
    processes (each would choose its own sibling): the rerun is refused, naming why."""
    from ember.train import KeepLastNCheckpoints, LearningCheckpointer

    training(run_dir, epochs=1).launch(learner())
    own = LearningCheckpointer(tmp_path / "ckpt", KeepLastNCheckpoints(1))
    with pytest.raises(RunDirectoryError, match=r"writes .*ckpt.* for every run"):
        training(run_dir).with_checkpointers(own).launch(learner())
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RunDirectoryError, match=r"this job has 2 processes \(WORLD_SIZE\)"):
        training(run_dir).launch(learner())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


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
        training(run_dir, epochs=1).exact_directory().launch(learner())
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


def test_the_lock_is_taken_with_o_excl(run_dir: Path) -> None:
    """Two claims of one directory in one process: the second is refused (O_EXCL)."""
    config = training(run_dir).resume_latest().config
    with (
        claim_for_run(config),
        pytest.raises(RunDirectoryError, match=f"pid {os.getpid()} on this host"),
        claim_for_run(config),
    ):
        pass
    assert not (run_dir / LOCK).exists()


def test_under_ddp_only_rank_0_claims_the_directory(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rank > 0 writes nothing, so it takes no lock and checks nothing (rank 0 does)."""
    from ember.train import DistributedDataParallel

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
        training(runs / "version_1", epochs=1).exact_directory().launch(learner())


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
    """overwrite(), exact_directory(), a checkpointer with its own directory, several
    processes: each refused at launch with the reason and the fix, before anything is
    written."""
    from ember.train import KeepLastNCheckpoints, LearningCheckpointer

    runs = tmp_path / "runs"
    with pytest.raises(ValueError, match=r"overwrite\(\) has nothing to remove"):
        training(runs).versioned().overwrite().launch(learner())
    with pytest.raises(ValueError, match=r"exact_directory\(\) keeps it in the one given"):
        training(runs).versioned().exact_directory().launch(learner())
    own = LearningCheckpointer(tmp_path / "ckpt", KeepLastNCheckpoints(1))
    with pytest.raises(ValueError, match=r"with_checkpointers\(\) writes .*ckpt.*default"):
        training(runs).with_checkpointers(own).versioned().launch(learner())
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"this job has 2 \(WORLD_SIZE\)"):
        training(runs).versioned().launch(learner())
    assert not runs.exists()


def test_a_versioned_run_says_which_version_it_writes(tmp_path: Path) -> None:
    """Issue 38 item 7: a versioned() run names its version_N on the screen, before training,
    and in experiment.log; the version before it stays byte for byte."""
    runs = tmp_path / "runs"
    training(runs, epochs=1).versioned().launch(learner())
    first = tree(runs / "version_0")
    stream = io.StringIO()
    result = (
        training(runs, epochs=1).versioned().renderer(CliMetricsRenderer(stream)).launch(learner())
    )
    version = runs / "version_1"
    assert result.directory == version
    assert stream.getvalue().splitlines()[:2] == [
        f"Run directory: {version}",
        "Starting training for 1 epoch.",
    ]
    assert f"INFO ember.train: Run directory: {version}\n" in (
        (version / "experiment.log").read_text()
    )
    assert tree(runs / "version_0") == first


def test_versioned_launches_at_once_each_take_a_version_of_their_own(tmp_path: Path) -> None:
    """The audit's race (issue 37 item 7: 1 in 68 launches refused): sixteen versioned()
    launches claiming at the same moment each hold a version of their own, none refused."""
    count = 16
    config = training(tmp_path / "runs").versioned().config
    start, holding = threading.Barrier(count, timeout=60), threading.Barrier(count, timeout=60)
    claimed: list[Path] = []
    failed: list[BaseException] = []

    def launch() -> None:
        try:
            start.wait()
            with claim_for_run(config) as mine:
                claimed.append(mine.directory)
                holding.wait()  # every claim held at once
        except BaseException as error:  # reported below, with the others'
            failed.append(error)
            holding.abort()

    threads = [threading.Thread(target=launch) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    assert sorted(claimed) == sorted(tmp_path / "runs" / f"version_{n}" for n in range(count))


@pytest.mark.parametrize("candidates", [versions, siblings], ids=["version_N", "DIR-N"])
def test_a_directory_taken_between_the_scan_and_the_claim_is_passed_over(
    tmp_path: Path, candidates: Callable[[Path], Iterator[Path]]
) -> None:
    """The race made to happen: another launch makes the directory this one's scan chose just
    before this one claims it; the claim takes the next one and never touches the other's."""
    base = tmp_path / "runs"
    (base / "version_2").mkdir(parents=True)  # the scan then chooses version_3
    chosen, expected = candidates(base), list(itertools.islice(candidates(base), 2))

    def raced() -> Iterator[Path]:
        taken = next(chosen)
        taken.mkdir()  # the other launch wins it between the scan and the claim
        (taken / "theirs").write_text("x")
        yield taken
        yield from chosen

    with ExitStack() as held:
        mine = claim_new(raced(), held)
        assert mine == expected[1] and (mine / LOCK).is_file()
    assert not mine.exists()  # nothing was written: made and removed again
    assert sorted(p.name for p in expected[0].iterdir()) == ["theirs"]  # no lock of ours
