"""Kill a rank at a random point under torchrun, 10 times: recoveries and time to recover.

Each run is ``tests/train/strategy/elastic_job.py`` under ``torchrun --nproc-per-node 2
--max-restarts 2`` (gloo, 2 CPU processes): 4 epochs of 7 steps of a dropout MLP,
``checkpoint_every(steps=5)``, ``resume_latest()``. In the first attempt a rank drawn at random
SIGKILLs itself at a point drawn at random (a train step, or a validation step); torchrun
restarts both ranks and the run resumes from its last checkpoint. A run *recovered* when the
job exits 0 and its final weights and every train and valid ``Loss.log`` equal, bit for bit,
those of the same run that lost nothing (trained once first, in its own job). Per run, from
the kill (``time.time()`` in the killed rank, just before ``os.kill``):

- *detected*: the survivor's launch returned with its ``DistributedError``;
- *restarted*: the restarted rank 0 began its job (torchrun saw the exit, stopped the
  survivor, restarted the workers; Python, torch and ember imported);
- *training again*: the restarted rank 0 began its first train step (the script built its
  model and loaders, launch formed the process groups and restored the checkpoint).

    python benchmarks/elastic.py [--runs 10] [--strategy ddp|fsdp] [--rendezvous static|c10d]
                                 [--seed S]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]
TRAIN_UNITS = {"ddp": 24, "fsdp": 28}  # rank 1's train steps (DDP skips its empty shares)
VALID_UNITS = {"ddp": 12, "fsdp": 16}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def torchrun(out: Path, name: str, args: argparse.Namespace, kill: str | None) -> int:
    """The job under torchrun; its exit code (its output goes to ``out/name.out``)."""
    port = str(free_port())
    if args.rendezvous == "static":
        where = ["--master-addr", "127.0.0.1", "--master-port", port]
    else:
        where = ["--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}"]
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        "--max-restarts", "2", *where, "-m", "tests.train.strategy.elastic_job", str(out),
        name, "--strategy", args.strategy, *(["--kill", kill] if kill else []),
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    with (out / f"{name}.out").open("w") as output:
        done = subprocess.run(
            command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, check=False
        )
    return done.returncode


def logs(run: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(run)): path.read_bytes()
        for split in ("train", "valid")
        for path in sorted((run / split).rglob("*.log"))
    }


def identical(out: Path, name: str) -> bool:
    """Whether run ``name`` ended with the reference's weights and logs, bit for bit."""
    path = out / f"{name}.safetensors"
    if not path.exists():
        return False
    ours, theirs = load_file(path), load_file(out / "reference.safetensors")
    same = sorted(ours) == sorted(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)
    return same and logs(out / name) == logs(out / "reference")


def since_kill(out: Path, name: str, event: str) -> float | None:
    """Seconds from the kill to ``event`` (a file of the job's), None if it did not happen."""
    path = out / f"{name}.{event}"
    if not path.exists():
        return None
    return float(path.read_text()) - float((out / f"{name}.killed-at").read_text())


def shown(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--rendezvous", choices=["static", "c10d"], default="static")
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    draw = random.Random(seed)
    print(f"{args.strategy}, {args.rendezvous} rendezvous, 2 gloo ranks, seed {seed}")
    out = Path(tempfile.mkdtemp(prefix="ember-elastic-"))
    try:
        started = time.monotonic()
        assert torchrun(out, "reference", args, None) == 0, (out / "reference.out").read_text()
        print(f"reference run: {time.monotonic() - started:.1f} s (one attempt)")
        print(
            "run  kill             exit  attempts  identical  detected  restarted  training again"
        )
        recovered, recoveries = 0, []
        for run in range(1, args.runs + 1):
            split = draw.choice(["train", "train", "valid"])  # train steps are most of a run
            units = (TRAIN_UNITS if split == "train" else VALID_UNITS)[args.strategy]
            kill = f"{draw.randrange(2)}:{split}:{draw.randint(1, units)}"
            name = f"run-{run}"
            code = torchrun(out, name, args, kill)
            attempts = len(list(out.glob(f"{name}.attempt-*")))
            same = code == 0 and identical(out, name)
            again = since_kill(out, name, "training-again-at")
            recovered += same
            if same and again is not None:
                recoveries.append(again)
            print(
                f"{run:>3}  {kill:<15}  {code:>4}  {attempts:>8}  {same!s:>9}  "
                f"{shown(since_kill(out, name, 'failed-at')):>8}  "
                f"{shown(since_kill(out, name, 'attempt-1')):>9}  {shown(again):>14}"
            )
        print(f"recovered {recovered}/{args.runs} bit-identical", end="")
        if recoveries:
            print(
                f"; kill to training again: median {statistics.median(recoveries):.2f} s, "
                f"min {min(recoveries):.2f} s, max {max(recoveries):.2f} s"
            )
        else:
            print()
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
