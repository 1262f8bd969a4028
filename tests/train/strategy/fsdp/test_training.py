"""FullyShardedDataParallel over 2 gloo processes on the CPU: sharded training and checkpoints."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from ember import CheckpointError
from ember._rundir.manifest import latest_complete_epoch, read_manifest
from ember.distributed import DistributedError, spawn
from ember.train import GradNormMetric, Learner, load_checkpoint
from ember.train._checkpoint.file import FileCheckpointer
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.fsdp import helpers

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(150)]

TIMEOUT = timedelta(seconds=30)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One job for the equality, resume and reshard tests: rank start-up is the slow part."""
    out = tmp_path_factory.mktemp("fsdp")
    spawn(helpers.one_rank, 1, str(out), timeout=TIMEOUT, join_timeout=60)
    spawn(helpers.equal_and_exact, 2, str(out), timeout=TIMEOUT, join_timeout=120)
    return out


def assert_close(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(actual[name], tensor, rtol=0, atol=1e-6)


def test_two_ranks_equal_one_process_and_log_the_same_losses(
    two_ranks: Path, tmp_path: Path
) -> None:
    """Sharded per Linear over 2 ranks (the tails of the epochs leave rank 1 an empty share):
    the weights of one process with the same global batch, and the same Loss lines."""
    builder, learner = ddp_helpers.training(tmp_path / "single", 3)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    assert_close(load_file(two_ranks / "a3.safetensors"), learner.model.state_dict())
    for split in ("train", "valid"):
        for epoch in (1, 2, 3):
            relative = Path(split, f"epoch-{epoch}", "Loss.log")
            ours = (two_ranks / "a" / relative).read_text().splitlines()
            theirs = (tmp_path / "single" / relative).read_text().splitlines()
            assert len(ours) == len(theirs)
            for line, reference in zip(ours, theirs, strict=True):
                (value, weight), (expected, count) = line.split(","), reference.split(",")
                assert weight == count
                assert float(value) == pytest.approx(float(expected), abs=1e-6)


def test_a_world_size_that_does_not_divide_the_global_batch_still_equals_one_process(
    two_ranks: Path, tmp_path: Path
) -> None:
    """A global batch of 7 over 2 ranks (shares of 4 and 3, each loss weighted by world x
    share / 7), with a callable wrapping policy and reshard_after_forward=False: the weights
    of one process."""
    builder, learner = ddp_helpers.training(tmp_path / "single", 1, batch=7)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    assert_close(load_file(two_ranks / "g.safetensors"), learner.model.state_dict())


def test_clipping_accumulation_checkpointing_and_bf16_under_fsdp(
    two_ranks: Path, tmp_path: Path
) -> None:
    """clip_grad_norm over the DTensor gradients (the logged norms too),
    grads_accumulation(mean=True) and gradient checkpointing: 2 ranks equal one process, with
    no reduce-scatter inside an accumulation window (one per unit, the two Linears, at each
    window's last micro-batch only); bf16-mixed (FSDP's MixedPrecisionPolicy) trains."""
    # units 1-7 of an epoch, windows of 2: (1, 2), (3, 4), (5, 6) and the pass's tail (7)
    closing = [[unit, True] for unit in (2, 2, 4, 4, 6, 6, 7, 7)]
    for name in ("d", "e"):
        for rank in (0, 1):
            calls = json.loads((two_ranks / f"{name}-scatters-rank{rank}.json").read_text())
            assert calls == closing * 2, (name, rank)
    builder, learner = ddp_helpers.training(tmp_path / "single", 2)
    builder = builder.clip_grad_norm(0.05).grads_accumulation(2, mean=True)
    builder = builder.metrics(GradNormMetric())
    single = builder.gradient_checkpointing(["net.0"]).launch(learner)
    assert single.error is None, single.traceback
    assert_close(load_file(two_ranks / "d.safetensors"), learner.model.state_dict())
    relative = Path("train", "epoch-2", "Gradient_Norm.log")
    norms = (two_ranks / "d" / relative).read_text().splitlines()
    expected = (tmp_path / "single" / relative).read_text().splitlines()
    assert len(norms) == len(expected) > 0
    for line, reference in zip(norms, expected, strict=True):
        assert float(line.split(",")[0]) == pytest.approx(float(reference.split(",")[0]), abs=1e-5)
    bf16 = load_file(two_ranks / "e.safetensors")
    initial = ddp_helpers.training(tmp_path / "fresh", 1)[1].model.state_dict()
    assert all(torch.isfinite(t).all() for t in bf16.values())
    assert any(not torch.equal(bf16[n], initial[n]) for n in initial)
    # rank 0's weights after 2 epochs: bf16 compute, not far from the float32 run's
    for name, tensor in load_file(two_ranks / "d.safetensors").items():
        torch.testing.assert_close(bf16[name], tensor, rtol=0, atol=0.05)


def test_sharded_checkpoints_resume_bit_identical(two_ranks: Path) -> None:
    """Each rank wrote its own shards, listed with their SHA-256 in rank 0's manifest; a run
    stopped after epoch 1 and resumed to 3 ends bit-identical to the uninterrupted one (A)."""
    checkpoints = two_ranks / "c" / "checkpoint"
    manifest = read_manifest(checkpoints, 3)
    names = sorted(entry.name for entry in manifest.files)
    assert "shards-rank0-3.safetensors" in names and "shards-rank1-3.safetensors" in names
    index = FileCheckpointer(checkpoints, "model").restore(3).metadata
    assert index["world"] == 2
    shards = index["tensors"]["net.0.weight"]["shards"]
    assert [s["offsets"] for s in shards] == [[0, 0], [8, 0]]
    uninterrupted = load_file(two_ranks / "a3.safetensors")
    resumed = load_file(two_ranks / "c3.safetensors")
    for name, tensor in uninterrupted.items():
        assert torch.equal(resumed[name], tensor), name
    for split in ("train", "valid"):
        relative = Path(split, "epoch-3", "Loss.log")
        assert (two_ranks / "c" / relative).read_text() == (two_ranks / "a" / relative).read_text()


def test_two_ranks_checkpoint_resumes_in_one_process_and_exports(
    two_ranks: Path, tmp_path: Path
) -> None:
    """Reshard 2 -> 1: one process resumes the 2-rank run after epoch 1 (model and Adam state
    reassembled) and ends with its weights; load_checkpoint and `ember export` consolidate the
    shards into whole tensors equal to the sharded run's."""
    final = load_file(two_ranks / "a3.safetensors")
    directory = tmp_path / "resumed"
    shutil.copytree(two_ranks / "a" / "checkpoint", directory / "checkpoint")
    for epoch in (2, 3):  # keep only epoch 1 to resume from
        for path in (directory / "checkpoint").glob(f"*-{epoch}.*"):
            path.unlink()
    builder, learner = ddp_helpers.training(directory, 3, resume=1)
    resumed = builder.launch(learner)
    assert resumed.error is None, resumed.traceback
    assert_close(learner.model.state_dict(), final)
    model = load_checkpoint(two_ranks / "a", 3, into=ddp_helpers.Mlp())
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, final[name]), name
    output = tmp_path / "weights.safetensors"
    command = [sys.executable, "-m", "ember", "export", str(two_ranks / "a"), "-o", str(output)]
    command += ["--epoch", "3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    exported = load_file(output)
    assert exported.keys() == final.keys()
    assert all(torch.equal(exported[name], tensor) for name, tensor in final.items())


def test_a_one_rank_checkpoint_resumes_over_two_ranks(two_ranks: Path, tmp_path: Path) -> None:
    """Reshard 1 -> 2: an FSDP run in a world of 1 checkpoints epoch 1 (its shards are whole
    tensors); 2 ranks resume it (each cuts its own half of every tensor and of Adam's state)
    and end epoch 2 with the weights of one process's uninterrupted run."""
    index = FileCheckpointer(two_ranks / "w" / "checkpoint", "model").restore(1).metadata
    assert index["world"] == 1
    builder, learner = ddp_helpers.training(tmp_path / "single", 2)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    assert_close(load_file(two_ranks / "w2.safetensors"), learner.model.state_dict())


def test_a_rank_dying_during_a_sharded_write_leaves_the_previous_checkpoint(
    tmp_path: Path,
) -> None:
    """Rank 1 dies half-way through its shards of epoch 2: the job fails, epoch 2 has no
    manifest, and epoch 1 stays the newest complete checkpoint, loadable."""
    with pytest.raises(DistributedError, match=r"rank 1 failed first \(exit code 3\)"):
        spawn(
            helpers.die_while_writing,
            2,
            str(tmp_path),
            timeout=timedelta(seconds=8),  # rank 0 waits for rank 1's report at most that long
            join_timeout=60,
        )
    checkpoints = tmp_path / "run" / "checkpoint"
    assert not (checkpoints / "manifest-2.json").exists()
    assert latest_complete_epoch(checkpoints, ("model", "optim", "scheduler", "state")) == 1
    load_checkpoint(tmp_path / "run", 1, into=ddp_helpers.Mlp())


def test_resume_latest_on_a_finished_sharded_run_returns_its_learner(tmp_path: Path) -> None:
    """The fault: resume_latest() on a finished FSDP run loaded the shard index as a plain
    model record ("does not fit the model"); now every rank, and a single process, gets the
    run's result: its weights and Adam's state reassembled from the shards."""
    spawn(helpers.finished_twice, 2, str(tmp_path), timeout=TIMEOUT, join_timeout=60)
    trained = load_file(tmp_path / "trained.safetensors")
    for rank in (0, 1):
        result = json.loads((tmp_path / f"again-rank{rank}.json").read_text())
        assert result == {"error": None, "stop_reason": None, "last_epoch": 1}
        again = load_file(tmp_path / f"again-rank{rank}.safetensors")
        assert_close({name: again[name] for name in trained}, trained)
        assert {name.rpartition("/")[2] for name in again.keys() - trained.keys()} == {
            "step",
            "exp_avg",
            "exp_avg_sq",
        }
    builder, learner = ddp_helpers.training(tmp_path / "run", 1)
    single = builder.resume_latest().launch(learner)
    assert single.error is None and single.last_epoch == 1, single.traceback
    assert_close(learner.model.state_dict(), trained)
    assert learner.optimizer.state_dict()["state"]


def free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port: int = listener.getsockname()[1]
        return port


@pytest.mark.parametrize("per_node", [1, 2])
def test_hybrid_sharding_over_two_nodes_equals_one_process(tmp_path: Path, per_node: int) -> None:
    """`torchrun --nnodes 2 --nproc-per-node N` with a c10d rendezvous on 127.0.0.1 (two
    "nodes" on this machine): hybrid FSDP over a 2 x N mesh (the N ranks of a node shard the
    model, the nodes replicate it) ends with the weights of one process."""
    port = free_port()
    command = [
        *(sys.executable, "-m", "torch.distributed.run", "--nnodes", "2"),
        *("--nproc-per-node", str(per_node), "--rdzv-backend", "c10d", "--rdzv-id", "hybrid"),
        *("--rdzv-endpoint", f"127.0.0.1:{port}", "-m", "tests.train.strategy.fsdp.hybrid_job"),
        str(tmp_path),
    ]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[4])}
    nodes = [
        subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for _ in range(2)
    ]
    try:
        outputs = [node.communicate(timeout=100)[0].decode() for node in nodes]
    finally:
        for node in nodes:
            node.kill()
    assert [node.returncode for node in nodes] == [0, 0], outputs
    mesh = json.loads((tmp_path / "mesh.json").read_text())
    assert mesh == {
        "names": ["replicate", "shard"],
        "shape": [2, per_node],
        "placements": ["R", "S(0)"],  # torch's short names: replicated, sharded on dim 0
        "timeouts": [30.0, 30.0],  # the strategy's timeout, not torch's 30 minutes
    }
    builder, learner = ddp_helpers.training(tmp_path / "single", 1)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    assert_close(load_file(tmp_path / "hybrid.safetensors"), learner.model.state_dict())


def resumable_copy(source: Path, directory: Path, keep: int) -> Path:
    """A copy of a run's checkpoints holding only epoch ``keep``."""
    shutil.copytree(source / "checkpoint", directory / "checkpoint")
    for path in (directory / "checkpoint").iterdir():
        if not path.name.endswith(f"-{keep}.safetensors") and path.name != f"manifest-{keep}.json":
            path.unlink()
    return directory


def test_missing_shards_and_another_model_are_refused_naming_them(
    two_ranks: Path, tmp_path: Path
) -> None:
    """A shard file gone: the resume is refused at launch naming it; a model with another
    width: the resume says the checkpoint does not fit; a second run on a model sharded
    already: refused before starting."""
    directory = resumable_copy(two_ranks / "a", tmp_path / "missing", 1)
    (directory / "checkpoint" / "shards-rank1-1.safetensors").unlink()
    builder, learner = ddp_helpers.training(directory, 2, resume=1)
    with pytest.raises(CheckpointError, match=r"shards-rank1-1\.safetensors .* is missing"):
        builder.launch(learner)
    directory = resumable_copy(two_ranks / "a", tmp_path / "other", 1)
    builder, learner = ddp_helpers.training(directory, 2, resume=1)
    wide = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Dropout(0.0), nn.Linear(32, 1))
    learner.model.net = wide
    result = builder.launch(Learner(learner.model, torch.optim.Adam(wide.parameters()), 1e-2))
    assert isinstance(result.error, CheckpointError)
    assert "'net.0.weight' does not fit" in str(result.error)
    for rank in (0, 1):
        twice = json.loads((two_ranks / f"twice-rank{rank}.json").read_text())
        assert "fully_shard was applied already" in twice["error"]
