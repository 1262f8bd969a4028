"""A training job that loses a rank, run under torchrun's elastic agent (``python -m`` this).

::

    torchrun --nproc-per-node 2 --max-restarts 2 -m tests.train.strategy.elastic_job OUT \\
        NAME [NAME ...] [--strategy ddp|fsdp] [--kill RANK:SPLIT:N]

trains the runs ``OUT/NAME`` one after the other (2 ranks, 4 epochs of 7 steps of a dropout
MLP, ``checkpoint_every(steps=5)``, ``resume_latest()``: after a restart the runs finished by
an earlier attempt, whose weights are saved, are skipped, an unfinished one resumes).
``--kill 1:train:12`` SIGKILLs rank 1 in its 12th train step of the last run (``valid:N``:
its N-th validation step), in the first attempt only.
Files written into ``OUT`` (times are ``time.time()``):

- ``NAME.safetensors``: the run's final weights (whole tensors, also under FSDP), by rank 0;
- ``NAME.killed-at``: when the killed rank killed itself;
- ``NAME.failed-at``: when the surviving rank's launch returned with the error it found;
- ``NAME.attempt-<k>``: when attempt ``k``'s process of rank 0 started its job;
- ``NAME.training-again-at``: when rank 0 began its first train step after a restart.
"""

from __future__ import annotations

import argparse
import io
import os
import signal
import time
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from ember.train import (
    CliMetricsRenderer,
    DistributedDataParallel,
    FullyShardedDataParallel,
    KeepLastNCheckpoints,
    Learner,
    LearningResult,
    LossMetric,
    SupervisedTraining,
)
from tests.train.strategy.ddp.helpers import Mlp, loaders
from tests.train.strategy.fsdp.helpers import full_weights

STEPS_PER_EPOCH, EPOCHS = 7, 4  # 49 training items in global batches of 8: 7 steps an epoch


def attempt() -> int:
    """torchrun's restart count: 0 in the first attempt."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))


def training(
    out: Path, name: str, strategy: str, dropout: float = 0.1
) -> tuple[SupervisedTraining, Learner[Mlp]]:
    """The run: the same on every rank and in every attempt, whatever the world size."""
    torch.manual_seed(0)
    model = Mlp(dropout=dropout)
    train, valid = loaders()
    kind = FullyShardedDataParallel if strategy == "fsdp" else DistributedDataParallel
    builder = (
        SupervisedTraining(out / name, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_checkpointing_strategy(KeepLastNCheckpoints(10))
        .with_default_checkpointers()
        .num_epochs(EPOCHS)
        .checkpoint_every(steps=5)
        .resume_latest()
        .errors_in_result()
        .with_training_strategy(kind())
    )
    if strategy == "fsdp":  # the optimizer is built on the sharded parameters
        return builder, Learner(model, torch.optim.Adam, 1e-2)
    return builder, Learner(model, torch.optim.Adam(model.parameters()), 1e-2)


def arm(model: Mlp, out: Path, name: str, kill: str | None) -> None:
    """Rank 0 notes when it trains again after a restart; the rank named by ``kill`` dies at
    its point, in the first attempt (the process group is not made yet: torchrun's RANK)."""
    rank = int(os.environ["RANK"])
    if rank == 0 and attempt() > 0:

        def noted(step: int) -> None:
            if step == 1:
                (out / f"{name}.training-again-at").write_text(repr(time.time()))

        model.on_train_step = noted
    if kill is None or attempt() > 0:
        return
    victim, split, unit = kill.split(":")
    if int(victim) != rank:
        return

    def die(step: int) -> None:
        if step == int(unit):
            (out / f"{name}.killed-at").write_text(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)

    if split == "train":
        model.on_train_step = die
    else:
        model.on_inference_step = die


def save(result: LearningResult[Mlp], path: Path, strategy: str) -> None:
    """Rank 0 writes the whole weights (a collective under FSDP: every rank calls it)."""
    model = result.model
    if strategy == "fsdp":
        weights = full_weights(model)
    else:
        weights = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if dist.get_rank() == 0:
        save_file(weights, str(path))


def fewer_ranks(out_dir: str, strategy: str, names: list[str], kill_at: int | None) -> None:
    """Under ``spawn``: the runs ``names`` one after the other, without dropout (its RNG draws
    would depend on the world size), on this job's ranks; in the last, rank 1 SIGKILLs itself
    in its ``kill_at``-th train step; rank 0 saves each run's whole weights at its end."""
    out = Path(out_dir)
    for name in names:
        builder, learner = training(out, name, strategy, dropout=0.0)
        if name == names[-1] and kill_at is not None and dist.get_rank() == 1:
            learner.model.on_train_step = lambda step: (
                os.kill(os.getpid(), signal.SIGKILL) if step == kill_at else None
            )
        result = builder.launch(learner)
        if result.error is not None:
            raise RuntimeError(f"{name} failed:\n{result.traceback}")
        save(result, out / f"{name}.safetensors", strategy)


def preempted(out_dir: str, strategy: str, names: list[str], signal_at: int | None) -> None:
    """Under ``spawn``: the runs ``names`` one after the other; in the last, every rank sends
    itself SIGTERM in its ``signal_at``-th train step, as a scheduler signals every process of
    a job it takes back (launch then ends the process with exit code 75)."""
    out = Path(out_dir)
    for name in names:
        builder, learner = training(out, name, strategy)
        if name == names[-1] and signal_at is not None:
            learner.model.on_train_step = lambda step: (
                signal.raise_signal(signal.SIGTERM) if step == signal_at else None
            )
        result = builder.launch(learner)
        if result.error is not None:
            raise RuntimeError(f"{name} failed:\n{result.traceback}")
        save(result, out / f"{name}.safetensors", strategy)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("names", nargs="+")
    parser.add_argument("--strategy", choices=["ddp", "fsdp"], default="ddp")
    parser.add_argument("--kill", default=None)
    args = parser.parse_args()
    out: Path = args.out
    rank = int(os.environ["RANK"])
    if rank == 0:
        (out / f"{args.names[-1]}.attempt-{attempt()}").write_text(repr(time.time()))
    for index, name in enumerate(args.names):
        if (out / f"{name}.safetensors").exists():  # finished by an earlier attempt
            continue
        builder, learner = training(out, name, args.strategy)
        last = index == len(args.names) - 1
        arm(learner.model, out, name, args.kill if last else None)
        result = builder.launch(learner)
        if result.error is not None:
            (out / f"{name}.failed-at").write_text(repr(time.time()))
            raise SystemExit(f"rank {rank}: {name} failed:\n{result.traceback}")
        save(result, out / f"{name}.safetensors", args.strategy)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
