"""Two "nodes" on this machine: two torchrun launchers meeting at a c10d rendezvous."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.expect import assert_weights_equal

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(200)]

ROOT = Path(__file__).resolve().parents[4]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_two_nodes_under_torchrun_equal_one_process(tmp_path: Path) -> None:
    """``torchrun --nnodes 2 --nproc-per-node 1`` twice (one launcher per node) with a c10d
    rendezvous on 127.0.0.1: both ranks end with one process's weights (1e-6)."""
    endpoint = f"127.0.0.1:{free_port()}"
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "2", "--nproc-per-node", "1",
        "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", "ember-test",
        "--max-restarts", "0", "--rdzv-conf", "timeout=60",
        "-m", "tests.train.strategy.ddp.multinode", str(tmp_path),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = [
        subprocess.Popen(
            command,
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    try:
        outputs = [node.communicate(timeout=150)[0].decode(errors="replace") for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(outputs)
    builder, learner = ddp_helpers.training(tmp_path / "single", 2)
    single = builder.launch(learner)
    assert single.error is None, single.traceback
    assert_weights_equal(
        [tmp_path / f"node-rank{rank}.safetensors" for rank in (0, 1)], learner.model
    )
