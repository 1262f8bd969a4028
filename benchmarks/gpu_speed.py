"""On one GPU: the Learner against a raw loop on the same device (issue 30's GPU targets).

Two models, each with and without ``compile``, every run training only (no validation):

- **MLP** 784-256-256-10, batch 128, fp32: launch-bound (a step is a few kernels of
  microseconds), where the loop's own Python shows; target <= 1.05x;
- **GPT-2 from a config** (8 layers, width 512, 8 heads, context 256, GPT-2's vocabulary of
  50,257 with tied embeddings: ~51M parameters), batch 16, ``bf16-mixed``; target <= 1.02x.

Both sides read the same ``torch.utils.data.DataLoader`` (``pin_memory=True``) over CPU tensors:
the raw loop is the hand loop a careful user writes, copying each batch with
``non_blocking=True`` one batch ahead of the step, keeping the losses on the device and reading
them once at the end; ember gets the loader as it is (``TorchDataLoader`` moves each batch to
the model's device). Beside the time ratio (medians of alternated pairs, after an untimed
warm-up run of each side, which also compiles): **host synchronisations per step** on the
training thread (``torch.cuda.set_sync_debug_mode("warn")``, warnings counted on the main
thread only: the metrics thread reads values back by design; target 0 in the loop), and **peak
memory** (``torch.cuda.max_memory_allocated``) against the raw loop's. Whether ember's copy of a
batch overlaps the step shows as the difference between the two sides when the model is
launch-bound. One process, one GPU; without CUDA it says so and exits 0 (``--device cpu``
runs it on the CPU at a tiny size, to check the script itself).

    python benchmarks/gpu_speed.py [--quick] [--device cpu]
"""

from __future__ import annotations

import argparse
import io
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LossMetric,
    RegressionOutput,
    SupervisedTraining,
    TrainOutput,
)
from event_floor import pairs, report, uptime
from learner_overhead import MediumMlp

Batch = tuple[torch.Tensor, torch.Tensor]


class Block(nn.Module):
    """A GPT-2 block: pre-norm causal self-attention and a 4x MLP, each with a residual."""

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        q, k, v = (t.view(batch, length, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class Gpt2(LearnerModel):
    """GPT-2 built from its configuration (no download): next-token loss on ``(tokens,
    targets)`` batches."""

    def __init__(
        self, vocab: int = 50257, context: int = 256, layers: int = 8, width: int = 512
    ) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(context, width)
        self.blocks = nn.Sequential(*(Block(width, 8) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2's

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        out: torch.Tensor = self.head(
            self.norm(self.blocks(self.tokens(tokens) + self.positions(positions)))
        )
        return out

    def regression(self, batch: Batch) -> RegressionOutput:
        tokens, targets = batch
        loss = F.cross_entropy(self(tokens).flatten(0, 1).float(), targets.flatten())
        # the output carries the loss alone (what LossMetric reads): the logits, 400 MB a batch,
        # would stay alive until the metrics thread had read the batch
        value = loss.detach().view(1, 1)
        return RegressionOutput(loss, value, value)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        return self.regression(batch)


def synchronized(device: torch.device) -> float:
    """The time once ``device`` has finished its queued work."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def loss_of(model: nn.Module, batch: Batch) -> torch.Tensor:
    if isinstance(model, Gpt2):  # compiled in place: still a Gpt2
        tokens, targets = batch
        return F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten())
    x, y = batch
    return F.cross_entropy(model(x), y)


def ahead(loader: TorchLoader[Any], device: torch.device) -> Iterator[Batch]:
    """The loader's batches on ``device``, each copied (non-blocking) while the one before it
    trains."""
    batches = iter(loader)
    pending = [t.to(device, non_blocking=True) for t in next(batches)]
    for batch in batches:
        following = [t.to(device, non_blocking=True) for t in batch]
        yield pending[0], pending[1]
        pending = following
    yield pending[0], pending[1]


def raw_run(model: nn.Module, loader: TorchLoader[Any], bf16: bool, device: torch.device) -> float:
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model.train()
    start = synchronized(device)
    total = torch.zeros((), device=device)
    for batch in ahead(loader, device):
        with torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            loss = loss_of(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        total += loss.detach().float()
    total.item()  # the losses read once, at the end
    return synchronized(device) - start


def ember_run(
    model: nn.Module, loader: TorchLoader[Any], bf16: bool, device: torch.device
) -> float:
    builder = (
        SupervisedTraining(Path(tempfile.mkdtemp(prefix="ember-gpu-")), loader)
        .metric_train_numeric(LossMetric())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .with_application_logger(None)
    )
    if bf16:
        builder = builder.precision("bf16-mixed")
    learner = Learner(model, torch.optim.Adam(model.parameters(), lr=1e-4), 1e-4)
    start = synchronized(device)
    result = builder.launch(learner)
    elapsed = synchronized(device) - start
    if result.error is not None:
        raise result.error
    return elapsed


def main_thread_syncs(run: Callable[[], float]) -> int:
    """Synchronising CUDA calls the training (main) thread made during ``run``."""
    count = 0
    shown = warnings.showwarning

    def show(message: Any, *args: Any, **kwargs: Any) -> None:
        nonlocal count
        if (
            "synchronizing" in str(message)
            and threading.current_thread() is threading.main_thread()
        ):
            count += 1

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = show
            run()
    finally:
        warnings.showwarning = shown
        torch.cuda.set_sync_debug_mode("default")
    return count


def compare(name: str, make: Callable[[], nn.Module], data: Batch, batch: int, bf16: bool,
            compiled: bool, repeats: int, device: torch.device, target: str) -> None:  # fmt: skip
    """One model, one variant: time ratio, syncs per step, peak memory, raw against ember."""
    loader = TorchLoader(TensorDataset(*data), batch_size=batch, pin_memory=device.type == "cuda")
    steps = len(loader)
    models = {"raw": make().to(device), "ember": make().to(device)}
    if compiled:
        for model in models.values():
            model.compile()  # the builder's .compile() does the same, in place
    runs = {
        "raw": lambda: raw_run(models["raw"], loader, bf16, device),
        "ember": lambda: ember_run(models["ember"], loader, bf16, device),
    }
    for run in runs.values():
        run()  # warm-up: compilation, allocator, cuBLAS handles
    times = pairs(runs, repeats)
    variant = f"{'bf16-mixed' if bf16 else 'fp32'}{', compiled' if compiled else ''}"
    report(f"{name}, {variant} ({steps} steps a run)", times, "raw", "ember", target)
    if device.type != "cuda":
        return
    peaks, syncs = {}, {}
    for side, run in runs.items():
        torch.cuda.reset_peak_memory_stats(device)
        syncs[side] = main_thread_syncs(run)
        peaks[side] = torch.cuda.max_memory_allocated(device)
    print(
        f"  host syncs on the training thread per step: ember {syncs['ember'] / steps:.2f}, raw "
        f"{syncs['raw'] / steps:.2f} (target 0 in ember's loop); peak memory: ember "
        f"{peaks['ember'] / 2**20:.0f} MiB, raw {peaks['raw'] / 2**20:.0f} MiB "
        f"({peaks['ember'] / peaks['raw']:.3f}x)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and pairs")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a tiny check)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu_speed: no CUDA device here: nothing to measure")
        return
    torch.manual_seed(0)
    tiny = device.type == "cpu"
    repeats = 3 if args.quick or tiny else 5
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"start: {uptime()}; {where}, torch {torch.__version__}", flush=True)
    mlp_steps = 20 if tiny else 300
    x, y = torch.randn(128 * mlp_steps, 784), torch.randint(0, 10, (128 * mlp_steps,))
    config = {"vocab": 1000, "context": 32, "layers": 2, "width": 64} if tiny else {}
    gpt_steps, length = (5, 32) if tiny else (60 if args.quick else 100, 256)
    vocab = config.get("vocab", 50257)
    text = torch.randint(0, vocab, (16 * gpt_steps, length + 1))
    params = sum(p.numel() for p in Gpt2(**config).parameters())
    for compiled in (False, True):
        mlp = "MLP 784-256-256-10, batch 128"
        compare(mlp, MediumMlp, (x, y), 128, False, compiled, repeats, device, "<= 1.05x")
        gpt = f"GPT-2 {params / 1e6:.0f}M, batch 16x{length}"
        tokens = (text[:, :-1], text[:, 1:])
        compare(
            gpt, lambda: Gpt2(**config), tokens, 16, True, compiled, repeats, device, "<= 1.02x"
        )
    print(f"end: {uptime()}")


if __name__ == "__main__":
    main()
