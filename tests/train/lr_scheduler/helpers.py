"""Shared pieces of the scheduler tests: running a scheduler, torch's canonical loop, the
torch schedulers the adapter is tried with."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.optim import lr_scheduler as tl

from ember.train import LrScheduler, TorchLrScheduler

# A scheduler plus what the Learner does with each lr it hands out (write it into the optimizer's
# param groups, then step the optimizer); for ember's own schedulers there is no optimizer.
AfterStep = Callable[[float], None]
Harness = tuple[LrScheduler, AfterStep]
Factory = Callable[[], Harness]


def no_optimizer(lr: float) -> None:
    del lr


def run_steps(harness: Harness, n: int) -> list[float]:
    scheduler, after_step = harness
    out = []
    for _ in range(n):
        lr = scheduler.step()
        after_step(lr)
        out.append(lr)
    return out


def first_lrs(scheduler: LrScheduler, n: int) -> list[float]:
    return run_steps((scheduler, no_optimizer), n)


def sgd(lr: float = 0.1, groups: int = 1) -> torch.optim.SGD:
    params = [{"params": [torch.nn.Parameter(torch.zeros(2))]} for _ in range(groups)]
    return torch.optim.SGD(params, lr=lr)


def learner_like(optimizer: torch.optim.Optimizer) -> AfterStep:
    """What ember's Learner does with an lr: write it into every group, then step the optimizer."""

    def after_step(lr: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()

    return after_step


def torch_sequence(build: Callable[[torch.optim.Optimizer], Any], lr: float, n: int) -> list[float]:
    """The lrs of the canonical torch loop: ``optimizer.step(); scheduler.step()``."""
    optimizer = sgd(lr)
    scheduler = build(optimizer)
    out = []
    for _ in range(n):
        out.append(float(optimizer.param_groups[0]["lr"]))
        optimizer.step()
        scheduler.step()
    return out


TORCH_SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], tl.LRScheduler]] = {
    "StepLR": lambda o: tl.StepLR(o, 3, 0.5),
    "MultiStepLR": lambda o: tl.MultiStepLR(o, [2, 5], 0.5),
    "ExponentialLR": lambda o: tl.ExponentialLR(o, 0.9),
    "CosineAnnealingLR": lambda o: tl.CosineAnnealingLR(o, 5, 0.01),
    "LinearLR": lambda o: tl.LinearLR(o, 0.1, 1.0, 4),
    "LambdaLR": lambda o: tl.LambdaLR(o, lambda e: 1 / (e + 1)),
    "MultiplicativeLR": lambda o: tl.MultiplicativeLR(o, lambda e: 0.95),
    "OneCycleLR": lambda o: tl.OneCycleLR(o, 1.0, total_steps=200),
    "CyclicLR": lambda o: tl.CyclicLR(o, 0.01, 0.1, step_size_up=3),
    "PolynomialLR": lambda o: tl.PolynomialLR(o, 5, 2.0),
    "CosineAnnealingWarmRestarts": lambda o: tl.CosineAnnealingWarmRestarts(o, 3, 2),
    "SequentialLR": lambda o: tl.SequentialLR(
        o, [tl.LinearLR(o, 0.1, 1.0, 3), tl.CosineAnnealingLR(o, 6)], [3]
    ),
    "ChainedScheduler": lambda o: tl.ChainedScheduler(
        [tl.ConstantLR(o, 0.5, 3), tl.ExponentialLR(o, 0.9)]
    ),
}


def torch_harness(name: str, groups: int = 1) -> tuple[Harness, torch.optim.Optimizer]:
    optimizer = torch.optim.SGD(
        [{"params": [torch.nn.Parameter(torch.zeros(2))]} for _ in range(groups)],
        lr=0.1,
        momentum=0.9,  # CyclicLR and OneCycleLR cycle the momentum
    )
    adapter = TorchLrScheduler(TORCH_SCHEDULERS[name](optimizer))
    return (adapter, learner_like(optimizer)), optimizer
