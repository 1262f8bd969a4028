"""Peak memory and step time of a deep MLP with and without gradient checkpointing.

The model: 24 blocks ``Linear(1024, 1024) → ReLU`` grouped in 4 segments of 6 blocks (the
model's direct children), then ``Linear(1024, 1)``; batch 256, MSE, SGD. Each step is what
ember's strategies run per batch: ``learner.train_step`` (forward, backward, gradients taken
out), ``lr_step``, ``optimizer_step``. Three variants:

* ``none``: plain model;
* ``segments``: ``apply_gradient_checkpointing(model)``, the default of
  ``SupervisedTraining.gradient_checkpointing()`` (the direct children: 4 segments + head);
* ``blocks``: every block checkpointed by name (``segment0.0``, …).

Memory is measured honestly for torch's allocator, which ``tracemalloc`` does not see:

* CPU: each variant's memory is measured in a fresh process of its own, started with
  ``MALLOC_MMAP_THRESHOLD_`` set so that glibc gives every buffer over 128 KiB back to the OS
  when it is freed (RSS then follows what is live). After a warm-up step it returns its free
  heap (``malloc_trim``), resets the kernel's peak-RSS counter (``/proc/self/clear_refs``,
  value 5) and reports as "step memory" ``VmHWM`` after two steps minus ``VmRSS`` before them:
  the activations, gradients and temporaries of a step, on top of the weights. Where the
  counter cannot be reset it measures ``ru_maxrss`` around its first two steps (the table says
  which).
* CUDA (``--device cuda``): ``torch.cuda.max_memory_allocated`` during a step minus the memory
  allocated before it.

Times are measured in the main process with the allocator's default settings (mapping every
buffer would slow the variants that allocate more): medians over rounds that run one step of
every variant in turn (checkpointing applied and removed around its step), so a change in the
machine's load hits all variants alike.

Not a test: it prints ratios against ``none``, measured side by side in one run.

    python benchmarks/gradient_checkpointing.py [--quick] [--device cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ember.train import Learner, LearnerModel, RegressionOutput, TrainOutput
from ember.train._gradient_checkpointing import (
    GradientCheckpointing,
    apply_gradient_checkpointing,
)

WIDTH = 1024
BLOCKS = 24
SEGMENTS = 4
BATCHES = (256, 2048)
VARIANTS = ("none", "segments", "blocks")
MIB = 1024 * 1024


class DeepMlp(LearnerModel):
    """24 ``Linear(1024, 1024) → ReLU`` blocks in 4 segments, then a linear head."""

    def __init__(self) -> None:
        super().__init__()
        per = BLOCKS // SEGMENTS
        for s in range(SEGMENTS):
            blocks = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU()) for _ in range(per)]
            self.add_module(f"segment{s}", nn.Sequential(*blocks))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for s in range(SEGMENTS):
            x = self.get_submodule(f"segment{s}")(x)
        out: torch.Tensor = self.head(x)
        return out

    def regression(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        x, y = batch
        out = self(x)
        return RegressionOutput(F.mse_loss(out, y), out, y)

    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> RegressionOutput:
        return self.regression(batch)


def block_names() -> list[str]:
    return [f"segment{s}.{b}" for s in range(SEGMENTS) for b in range(BLOCKS // SEGMENTS)]


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS counter (Linux >= 4.0); False where that is not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return _status_kib("VmHWM") is not None


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class Bench:
    """The model, its learner and one batch on ``device``; ``step()`` is one training step."""

    def __init__(self, device: str, batch_size: int) -> None:
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.model = DeepMlp().to(self.device)
        self.learner = Learner(self.model, torch.optim.SGD(self.model.parameters(), lr=1e-4), 1e-4)
        self.learner.fork(self.device)
        self.batch = (
            torch.randn(batch_size, WIDTH, device=self.device),
            torch.randn(batch_size, 1, device=self.device),
        )
        self.weights = sum(p.numel() * p.element_size() for p in self.model.parameters())

    def apply(self, variant: str) -> GradientCheckpointing | None:
        if variant == "segments":
            return apply_gradient_checkpointing(self.model)
        if variant == "blocks":
            return apply_gradient_checkpointing(self.model, block_names())
        return None

    def step(self) -> None:
        output = self.learner.train_step(self.batch)
        self.learner.lr_step()
        self.learner.optimizer_step(output.grads)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def measure_memory(bench: Bench, variant: str) -> dict[str, Any]:
    """Step memory of ``variant`` (on CPU: run in a fresh process started by ``main``)."""
    handle = bench.apply(variant)
    if bench.device.type == "cuda":
        bench.step()  # warm-up
        torch.cuda.reset_peak_memory_stats(bench.device)
        before = torch.cuda.memory_allocated(bench.device)
        bench.step()
        peak = torch.cuda.max_memory_allocated(bench.device)
        method = "cuda max_memory_allocated - memory_allocated before"
    elif not _reset_peak_rss():  # ru_maxrss would remember a warm-up: measure the first steps
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        bench.step()
        bench.step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        method = "ru_maxrss around the first steps (peak counter not resettable)"
    else:
        bench.step()  # warm-up
        _malloc_trim()
        _reset_peak_rss()
        before = (_status_kib("VmRSS") or 0) * 1024
        bench.step()
        bench.step()
        peak = (_status_kib("VmHWM") or 0) * 1024
        method = "VmHWM after reset - VmRSS before"
    if handle is not None:
        handle.remove()
    return {"step_memory": peak - before, "peak": peak, "method": method}


def measure_times(bench: Bench, steps: int) -> dict[str, float]:
    """Median step time of every variant, alternating variants step by step (same load)."""
    times: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for round_ in range(steps + 1):
        for variant in VARIANTS:
            with contextlib.ExitStack() as stack:
                handle = bench.apply(variant)
                if handle is not None:
                    stack.enter_context(handle)
                start = time.perf_counter()
                bench.step()
                if round_ > 0:  # round 0 warms every variant up
                    times[variant].append(time.perf_counter() - start)
    return {variant: statistics.median(values) for variant, values in times.items()}


def memory_in_fresh_process(variant: str, batch_size: int, args: argparse.Namespace) -> Any:
    command = [sys.executable, __file__, "--worker", variant, "--batch", str(batch_size)]
    command += ["--threads", str(args.threads)]
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", MALLOC_TRIM_THRESHOLD_="131072")
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 measured steps instead of 8")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--batch", type=int, nargs="+", default=list(BATCHES))
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.steps is None:
        args.steps = 3 if args.quick else 8
    if args.worker is not None:
        bench = Bench(args.device, args.batch[0])
        print(json.dumps(measure_memory(bench, args.worker)))
        return

    print(
        f"deep MLP: {BLOCKS} x Linear({WIDTH},{WIDTH})+ReLU in {SEGMENTS} segments, SGD; "
        f"device {args.device}, {args.threads} thread(s), {args.steps} measured steps"
    )
    for batch_size in args.batch:
        cuda = args.device.startswith("cuda")
        bench = Bench(args.device, batch_size)
        results = [
            {
                "variant": variant,
                "weights": bench.weights,
                **(
                    measure_memory(bench, variant)
                    if cuda
                    else memory_in_fresh_process(variant, batch_size, args)
                ),
            }
            for variant in VARIANTS
        ]
        for result, seconds in zip(results, measure_times(bench, args.steps).values(), strict=True):
            result["step_seconds"] = seconds
        del bench
        base = results[0]
        layer = batch_size * WIDTH * 4 / MIB
        print(
            f"\nbatch {batch_size} (one layer's activations: {layer:.0f} MiB; weights "
            f"{base['weights'] / MIB:.0f} MiB; memory: {base['method']})"
        )
        print(
            f"{'variant':<10} {'step memory':>12} {'ratio':>6} {'peak':>10} {'s/step':>8} "
            f"{'time ratio':>10}"
        )
        for result in results:
            print(
                f"{result['variant']:<10} {result['step_memory'] / MIB:>8.1f} MiB "
                f"{result['step_memory'] / base['step_memory']:>6.2f} "
                f"{result['peak'] / MIB:>6.0f} MiB {result['step_seconds']:>8.3f} "
                f"{result['step_seconds'] / base['step_seconds']:>9.2f}x"
            )


if __name__ == "__main__":
    main()
