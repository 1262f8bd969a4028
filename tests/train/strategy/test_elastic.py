"""A rank killed under torchrun's elastic agent: the job restarts, re-forms its process groups
and ends bit-identical to a run that lost nothing (weights and every Loss log), its run
directory telling both attempts (``benchmarks/elastic.py`` runs this 10 times)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ember._rundir.layout import LOCK
from ember.distributed import DistributedError, spawn
from tests.train.strategy import elastic_job
from tests.train.strategy.ddp.expect import assert_losses_equal

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def torchrun(
    out: Path, names: list[str], *, strategy: str, rendezvous: str, kill: str | None
) -> subprocess.CompletedProcess[str]:
    """``tests/train/strategy/elastic_job.py`` under torchrun: 2 ranks, at most 2 restarts,
    the ``static`` rendezvous (the agent's store) or ``c10d`` (its shared store server)."""
    port = str(free_port())
    if rendezvous == "static":
        where = ["--master-addr", "127.0.0.1", "--master-port", port]
    else:
        where = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--max-restarts", "2", *where, "-m", "tests.train.strategy.elastic_job", str(out),
        *names, "--strategy", strategy, *(["--kill", kill] if kill else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=130, check=False
    )


def logs(run: Path) -> dict[str, bytes]:
    """Every metric log of a run directory, by its path in it."""
    return {
        str(path.relative_to(run)): path.read_bytes()
        for split in ("train", "valid")
        for path in sorted((run / split).rglob("*.log"))
    }


def assert_same_run(out: Path, reference: str, run: str) -> None:
    """Bit-identical weights and metric logs."""
    ours, theirs = (
        load_file(out / f"{run}.safetensors"),
        load_file(out / f"{reference}.safetensors"),
    )
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
    assert logs(out / run) == logs(out / reference)


@pytest.mark.parametrize(
    ("strategy", "rendezvous", "kill"),
    [("ddp", "static", "1:train:12"), ("fsdp", "c10d", "0:train:24")],
    ids=["ddp-static-rank1", "fsdp-c10d-rank0-resumed-at-a-tail"],
)
def test_a_killed_rank_is_restarted_and_the_run_ends_bit_identical(
    tmp_path: Path, strategy: str, rendezvous: str, kill: str
) -> None:
    """One job trains a reference run, then the run whose rank is SIGKILLed (rank 1 in its
    12th train step; rank 0 in its 24th, after the checkpoint of step 20: the resumed FSDP
    run starts at an epoch's tail, where rank 1's share is empty): torchrun restarts both ranks, the
    finished reference is skipped, the run resumes from its last step checkpoint and
    ends with the reference's weights and Loss logs, bit for bit; its experiment.log holds
    both attempts, the second naming its restart and where it resumed; no lock is left."""
    done = torchrun(
        tmp_path, ["reference", "run"], strategy=strategy, rendezvous=rendezvous, kill=kill
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert (tmp_path / "run.killed-at").exists() and (tmp_path / "run.attempt-1").exists()
    assert not (tmp_path / "run.attempt-2").exists()  # one restart was enough
    assert_same_run(tmp_path, "reference", "run")
    log = (tmp_path / "run" / "experiment.log").read_text(encoding="utf-8")
    starts = re.findall(r"ember\.train: (Attempt of pid \d+ on .*)", log)
    assert len(starts) == 2
    assert "(torchrun restart 0 of at most 2): starts afresh" in starts[0]
    assert re.search(
        r"\(torchrun restart 1 of at most 2\): resumes from the checkpoint of ", starts[1]
    )
    assert not (tmp_path / "run" / LOCK).exists()


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_run_that_lost_a_rank_continues_on_one_within_float_tolerance(
    tmp_path: Path, strategy: str
) -> None:
    """A 2-rank run (after the same run that lost nothing, in the same job) loses rank 1
    (SIGKILL in its 12th step) and continues on 1 rank with
    resume_latest() (FSDP reshards its shards on load): it ends with the weights and the Loss
    lines of the 2-rank run that lost nothing, within float tolerance (the global batch does
    not depend on the world size)."""
    out, timeout = str(tmp_path), timedelta(seconds=60)
    with pytest.raises(DistributedError, match=r"rank 1 failed first \(killed by SIGKILL\)"):
        spawn(elastic_job.fewer_ranks, 2, out, strategy, ["full", "lost"], 12, timeout=timeout)
    spawn(elastic_job.fewer_ranks, 1, out, strategy, ["lost"], None, timeout=timeout)
    ours, theirs = (load_file(tmp_path / f"{name}.safetensors") for name in ("lost", "full"))
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=0, atol=1e-6)
    full, lost = logs(tmp_path / "full"), logs(tmp_path / "lost")
    assert sorted(lost) == sorted(full)
    for path in full:
        assert_losses_equal(tmp_path / "lost" / path, tmp_path / "full" / path)
    log = (tmp_path / "lost" / "experiment.log").read_text(encoding="utf-8")
    assert "resumes from the checkpoint of step 10 (in epoch 2)" in log


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_preempted_job_checkpoints_exits_75_and_resumes_bit_identical(
    tmp_path: Path, strategy: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Every rank gets SIGTERM in its 9th train step (the same run, not preempted, trained
    first in the same job): every rank ends its launch asking for a requeue, spawn reports
    exit code 75 (the first rank's: it stops the other), a step checkpoint is on disk (under
    FSDP with every rank's shards), and the run resumed from it ends bit-identical."""
    out, timeout = str(tmp_path), timedelta(seconds=60)
    with pytest.raises(DistributedError) as caught:
        spawn(elastic_job.preempted, 2, out, strategy, ["full", "run"], 9, timeout=timeout)
    assert capfd.readouterr().err.count("ember: received SIGTERM: training stopped after a") == 2
    assert set(caught.value.exit_codes.values()) == {75}
    assert "(exit code 75: stopped by a preemption signal, to requeue)" in str(caught.value)
    (step,) = (tmp_path / "run" / "checkpoint").glob("step-*")
    assert list(step.glob("manifest-*.json"))
    if strategy == "fsdp":
        assert len(list(step.glob("shards-rank*"))) == 2
    assert not (tmp_path / "run" / LOCK).exists()
    spawn(elastic_job.preempted, 2, out, strategy, ["run"], None, timeout=timeout)
    assert_same_run(tmp_path, "full", "run")
