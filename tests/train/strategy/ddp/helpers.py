"""What the DDP tests run in their spawned ranks (importable by the new processes)."""

from __future__ import annotations

import atexit
import copy
import io
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset, TorchDataLoader
from ember.train import (
    CliMetricsRenderer,
    ComposedCheckpointingStrategy,
    FullyShardedDataParallel,
    KeepLastNCheckpoints,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    MetricCheckpointingStrategy,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)
from ember.train._metric.query import MetricQuery
from ember.train._precision import Precision
from ember.train._step import current_step
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.fixtures import Batch, batcher, ember_threads

TRAIN_ITEMS, VALID_ITEMS = 49, 13  # batches 8 and 4: tails of 1 item, so rank 1's share is empty


def samples(count: int, seed: int) -> list[tuple[list[float], float]]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(count, 4, generator=generator)
    y = x.sin().sum(dim=1)
    return [(row, target) for row, target in zip(x.tolist(), y.tolist(), strict=True)]


def loaders(workers: int = 0, batch: int = 8) -> tuple[DataLoader[Batch], DataLoader[Batch]]:
    train = (
        DataLoaderBuilder(batcher)
        .batch_size(batch)
        .shuffle(7)
        .num_workers(workers)
        .build(InMemDataset(samples(TRAIN_ITEMS, 0)))
    )
    valid = DataLoaderBuilder(batcher).batch_size(4).build(InMemDataset(samples(VALID_ITEMS, 1)))
    return train, valid


class Mlp(LearnerModel):
    """``4 → 16 → 1`` regression; with ``dropout`` every step draws from the torch RNG."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(dropout), nn.Linear(16, 1))
        self.on_train_step: Callable[[int], None] | None = None
        self.on_inference_step: Callable[[int], None] | None = None
        self.steps = 0
        self.inferences = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out

    def regression(self, batch: Batch) -> RegressionOutput:
        out = self(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y), out, batch.y)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        self.steps += 1
        if self.on_train_step is not None:
            self.on_train_step(self.steps)
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        self.inferences += 1
        if self.on_inference_step is not None:
            self.on_inference_step(self.inferences)
        return self.regression(batch)


def training(
    directory: Path,
    epochs: int,
    strategy: Any = None,
    *,
    dropout: float = 0.0,
    workers: int = 0,
    resume: int | None = None,
    batch: int = 8,
) -> tuple[SupervisedTraining, Learner[Mlp]]:
    """The run every test compares: Adam, lr 1e-2, Loss on both splits, checkpoints kept;
    ``batch`` items a global training batch."""
    torch.manual_seed(0)
    model = Mlp(dropout)
    train, valid = loaders(workers, batch)
    builder = (
        SupervisedTraining(directory, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_checkpointing_strategy(KeepLastNCheckpoints(10))
        .with_default_checkpointers()
        .num_epochs(epochs)
        .errors_in_result()  # every rank's error is read from its result
    )
    if strategy is not None:
        builder = builder.with_training_strategy(strategy)
    if resume is not None:
        builder = builder.checkpoint(resume)
    return builder, Learner(model, torch.optim.Adam(model.parameters()), 1e-2)


def save_weights(path: Path, model: nn.Module) -> None:
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path))


def write_result(path: Path, result: LearningResult[Any], **extra: Any) -> None:
    record = {
        "error": None if result.error is None else f"{type(result.error).__name__}: {result.error}",
        "stop_reason": result.stop_reason,
        "last_epoch": result.last_epoch,
        **extra,
    }
    path.write_text(json.dumps(record), encoding="utf-8")


def _succeeded(result: LearningResult[Any]) -> None:
    if result.error is not None:
        raise RuntimeError(f"training failed:\n{result.traceback}")


# --- rank functions ------------------------------------------------------------------------------


def equal_and_exact(out_dir: str) -> None:
    """A: the run to compare with one process; B, C: uninterrupted and resumed, with dropout;
    D, E, H: clipping and mean accumulation in 32, bf16-mixed and 16-mixed; G: a global batch
    of 7."""
    out, rank = Path(out_dir), dist.get_rank()
    builder, learner = training(out / f"a-{rank}", 3, DistributedDataParallel(), workers=1)
    result = builder.launch(learner)
    _succeeded(result)
    save_weights(out / f"a-rank{rank}.safetensors", result.model)
    for name, epochs, resume in (("b", 3, None), ("c", 1, None), ("c", 3, 1)):
        builder, learner = training(
            out / name, epochs, DistributedDataParallel(), dropout=0.3, resume=resume
        )
        torch.manual_seed(100 + rank)  # ranks draw different dropout masks
        result = builder.launch(learner)
        _succeeded(result)
        dist.barrier()  # the next run reads what rank 0 wrote
        save_weights(out / f"{name}{epochs}-rank{rank}.safetensors", result.model)
    runs: tuple[tuple[str, Precision], ...] = (("d", "32"), ("e", "bf16-mixed"), ("h", "16-mixed"))
    for name, precision in runs:
        builder, learner = training(out / f"{name}-{rank}", 2, DistributedDataParallel())
        builder = builder.clip_grad_norm(0.05).grads_accumulation(2, mean=True)
        result = builder.precision(precision).launch(learner)
        _succeeded(result)
        save_weights(out / f"{name}-rank{rank}.safetensors", result.model)
    # G: a global batch of 7 that 2 ranks cannot divide: shares of 4 and 3 items
    builder, learner = training(out / f"g-{rank}", 1, DistributedDataParallel(), batch=7)
    result = builder.launch(learner)
    _succeeded(result)
    save_weights(out / f"g-rank{rank}.safetensors", result.model)


class StopAfter:
    """Early stopping that only rank 0 can decide (only it is asked)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.reason: str | None = None

    def should_stop(self, epoch: int, query: MetricQuery) -> bool:
        if epoch >= self.epoch and dist.get_rank() == 0:
            self.reason = f"enough after epoch {epoch}"
            return True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def agreements(out_dir: str) -> None:
    """Rank 1 interrupts; rank 0 stops early; then rank 1's step raises."""
    out, rank = Path(out_dir), dist.get_rank()
    builder, learner = training(out / "interrupt", 3, DistributedDataParallel())
    if rank == 1:
        interrupter = builder.interrupter()
        learner.model.on_train_step = lambda step: (
            interrupter.stop("rank 1 wants to stop") if step == 10 else None
        )
    write_result(out / f"interrupt-rank{rank}.json", builder.launch(learner))

    builder, learner = training(out / "early", 5, DistributedDataParallel())
    builder = builder.early_stopping(StopAfter(2))
    write_result(out / f"early-rank{rank}.json", builder.launch(learner))

    builder, learner = training(out / "error", 3, DistributedDataParallel(), dropout=0.0)
    if rank == 1:

        def fail(step: int) -> None:
            if step == 4:
                raise ValueError("rank 1's step failed")

        learner.model.on_train_step = fail
    started = time.monotonic()
    result = builder.launch(learner)
    write_result(out / f"error-rank{rank}.json", result, seconds=time.monotonic() - started)


def die_at_step(out_dir: str, step: int) -> None:
    """Rank 1's process dies in the middle of training."""
    rank = dist.get_rank()
    builder, learner = training(Path(out_dir) / "run", 3, DistributedDataParallel())
    if rank == 1:
        learner.model.on_train_step = lambda s: os._exit(3) if s == step else None
    result = builder.launch(learner)
    write_result(Path(out_dir) / f"rank{rank}.json", result)


def raise_on_rank(rank: int) -> None:
    if dist.get_rank() == rank:
        raise ValueError(f"rank {rank} refuses")
    dist.barrier()


def train_then_leave_work_for_the_exit(out_dir: str) -> None:
    """Train one epoch, then leave an atexit handler and a running thread (not a daemon) that
    each write a file of this rank's once ``fn`` has returned."""
    rank = dist.get_rank()
    builder, learner = training(Path(out_dir) / f"run-{rank}", 1, DistributedDataParallel())
    _succeeded(builder.launch(learner))
    atexit.register(Path(out_dir, f"exit-{rank}").write_text, "ran", encoding="utf-8")

    def after_return() -> None:
        # outlives fn for sure (the rank's exit must wait for it; nothing here waits on it)
        time.sleep(0.5)
        Path(out_dir, f"thread-{rank}").write_text("ran", encoding="utf-8")

    threading.Thread(target=after_return, name="user-thread").start()


def on_gpus(out_dir: str) -> None:
    """The run of ``equal_and_exact``'s A on CUDA with nccl (the strategy's defaults)."""
    rank = dist.get_rank()
    strategy = DistributedDataParallel()
    builder, learner = training(Path(out_dir) / "gpu", 3, strategy)
    result = builder.launch(learner)
    _succeeded(result)
    assert next(result.model.parameters()).device == torch.device("cuda", rank)
    save_weights(Path(out_dir) / f"gpu-rank{rank}.safetensors", result.model.cpu())


def hang_at_step(out_dir: str, step: int, seconds: float, progress_timeout: float) -> None:
    """Rank 1 stops making progress (sleeps ``seconds``) in its ``step``-th step; each rank
    writes its result, how long its launch took and ember's threads still alive after it."""
    rank = dist.get_rank()
    strategy = DistributedDataParallel(progress_timeout=timedelta(seconds=progress_timeout))
    builder, learner = training(Path(out_dir) / "run", 3, strategy)
    if rank == 1:
        learner.model.on_train_step = lambda s: time.sleep(seconds) if s == step else None
    started = time.monotonic()
    result = builder.launch(learner)
    write_result(
        Path(out_dir) / f"hang-rank{rank}.json",
        result,
        seconds=time.monotonic() - started,
        threads=ember_threads(),
    )


def block_at_step(out_dir: str, step: int, progress_timeout: float) -> None:
    """Rank 1 stops making progress for ever in its ``step``-th step: rank 0's launch fails
    naming it after ``progress_timeout`` seconds, and its ``fn`` raises (exit code 1)."""
    strategy = DistributedDataParallel(progress_timeout=timedelta(seconds=progress_timeout))
    builder, learner = training(Path(out_dir) / "run", 3, strategy)

    def block(unit: int) -> None:
        if unit == step:
            threading.Event().wait()

    if dist.get_rank() == 1:
        learner.model.on_train_step = block
    _succeeded(builder.launch(learner))


def fail_in_validation(out_dir: str, sharded: bool, how: str) -> None:
    """Rank 1 dies (``how="die"``: SIGKILL) or raises (``"raise"``) in its 2nd validation step,
    after writing when; each rank's ``fn`` raises its launch's error; rank 0 first writes when
    its launch returned."""
    out, rank = Path(out_dir), dist.get_rank()
    kind = FullyShardedDataParallel if sharded else DistributedDataParallel
    strategy = kind(timeout=timedelta(seconds=60), progress_timeout=timedelta(seconds=30))
    builder, learner = training(out / "run", 2, strategy)
    if sharded:
        learner = Learner(learner.model, torch.optim.Adam, 1e-2)

    def fail(step: int) -> None:
        if step == 2:
            (out / "failed-at").write_text(repr(time.time()), encoding="utf-8")
            if how == "die":
                os.kill(os.getpid(), signal.SIGKILL)
            raise ValueError("rank 1's validation step failed")

    if rank == 1:
        learner.model.on_inference_step = fail
    result = builder.launch(learner)
    if rank == 0:
        (out / "returned-at").write_text(repr(time.time()), encoding="utf-8")
    _succeeded(result)


def accumulation(out_dir: str) -> None:
    """grads_accumulation(2) with outputs reported every 3 units: the weights, the Loss lines,
    and the gradient all-reduces: those torch's reducer runs inside each ``train_step`` (unit,
    closing, count: the sequence number of the reducer's process group, which counts every
    collective on it) and those run by hand from Python (unit, closing)."""
    out, rank = Path(out_dir), dist.get_rank()
    by_hand: list[tuple[int, bool]] = []
    reduced: list[tuple[int, bool, int]] = []
    all_reduce = dist.all_reduce

    def counting(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        step = current_step()
        if step is not None:  # inside a training step: a gradient all-reduce
            by_hand.append((step.iteration, step.closing))
        return all_reduce(tensor, *args, **kwargs)

    strategy = DistributedDataParallel(report_every=3)
    builder, learner = training(out / f"f-{rank}", 2, strategy)
    model = learner.model
    train_step = model.train_step

    def reducing_step(batch: Batch) -> TrainOutput[RegressionOutput]:
        assert strategy._ranks is not None  # the run has started
        group = strategy._ranks.watched
        before = group._get_sequence_number_for_group()
        output = train_step(batch)
        step = current_step()
        assert step is not None
        reduced.append(
            (step.iteration, step.closing, group._get_sequence_number_for_group() - before)
        )
        return output

    model.train_step = reducing_step  # type: ignore[method-assign]  # counts around the step
    dist.all_reduce = counting
    try:
        result = builder.grads_accumulation(2).launch(learner)
    finally:
        dist.all_reduce = all_reduce
        del model.train_step
    _succeeded(result)
    assert type(result.model) is Mlp  # no wrapper, no class swap
    copy.deepcopy(result.model)  # torch's replicate forbids this: ember leaves the model plain
    save_weights(out / f"f-rank{rank}.safetensors", result.model)
    calls = {"by_hand": by_hand, "reduced": reduced}
    (out / f"f-calls-rank{rank}.json").write_text(json.dumps(calls), encoding="utf-8")


class Recorded(torch.utils.data.Dataset[tuple[list[float], float]]):
    """``samples(count, seed)`` that records every index torch reads."""

    def __init__(self, count: int, seed: int) -> None:
        self.rows = samples(count, seed)
        self.seen: list[int] = []

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> tuple[list[float], float]:
        self.seen.append(index)
        return self.rows[index]


def torch_training(
    directory: Path, sampler: str, strategy: Any = None
) -> tuple[SupervisedTraining, Learner[Mlp], Recorded]:
    """One epoch on TorchDataLoaders: shuffled by a seeded generator (``sampler="plain"``, the
    global batch 8) or by a DistributedSampler (``"distributed"``, 4 items a rank)."""
    torch.manual_seed(0)
    model = Mlp()
    dataset = Recorded(TRAIN_ITEMS, 0)

    def collate(items: list[tuple[list[float], float]]) -> Batch:
        return batcher(items, torch.device("cpu"))

    if sampler == "plain":
        generator = torch.Generator().manual_seed(3)
        torch_loader = torch.utils.data.DataLoader(
            dataset, batch_size=8, shuffle=True, generator=generator, collate_fn=collate
        )
    else:
        distributed: torch.utils.data.DistributedSampler[Any] = torch.utils.data.DistributedSampler(
            dataset, shuffle=True, seed=3
        )
        torch_loader = torch.utils.data.DataLoader(
            dataset, batch_size=4, sampler=distributed, collate_fn=collate
        )
    valid = torch.utils.data.DataLoader(Recorded(VALID_ITEMS, 1), batch_size=4, collate_fn=collate)
    builder = (
        SupervisedTraining(directory, TorchDataLoader(torch_loader), TorchDataLoader(valid))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(1)
    )
    if strategy is not None:
        builder = builder.with_training_strategy(strategy)
    return builder, Learner(model, torch.optim.Adam(model.parameters()), 1e-2), dataset


def torch_loaders(out_dir: str) -> None:
    """Both TorchDataLoader paths under DDP: the indices each rank read, and the weights."""
    out, rank = Path(out_dir), dist.get_rank()
    for sampler in ("plain", "distributed"):
        builder, learner, dataset = torch_training(
            out / f"{sampler}-{rank}", sampler, DistributedDataParallel()
        )
        result = builder.launch(learner)
        _succeeded(result)
        save_weights(out / f"{sampler}-rank{rank}.safetensors", result.model)
        (out / f"{sampler}-seen-rank{rank}.json").write_text(json.dumps(dataset.seen))


def result_facts(out_dir: str) -> None:
    """3 epochs with the default checkpointers (the best epoch kept by the Loss) and a summary:
    each rank writes the facts of its result."""
    out, rank = Path(out_dir), dist.get_rank()
    builder, learner = training(out / "run", 3, DistributedDataParallel())
    builder = builder.with_checkpointing_strategy(
        ComposedCheckpointingStrategy(
            [KeepLastNCheckpoints(1), MetricCheckpointingStrategy("Loss")]
        )
    ).summary()
    result = builder.launch(learner)
    _succeeded(result)
    facts = {
        "best_epoch": result.best_epoch,
        "checkpoints": {str(epoch): str(path) for epoch, path in result.checkpoints.items()},
        "summary": None if result.summary is None else result.summary.to_json(),
    }
    write_result(out / f"facts-rank{rank}.json", result, **facts)
