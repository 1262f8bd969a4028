"""On CUDA the training loop never waits for the device: no host synchronisation in a step.

``torch.cuda.set_sync_debug_mode("error")`` makes every synchronising call raise (an
``.item()``, a blocking copy to the host, a stream synchronisation). The loop runs under it with
batches already on the GPU and a processor that reads nothing (reading the values back is the
metrics thread's job), so what is checked is the loop's own work: the step, accumulation,
clipping, the measured gradient norm, bf16 autocast, the optimizer and the scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import Learner, LinearLr, SingleDevice
from tests.train.fixtures import Batch, SpyProcessor, TinyRegressor, run_loop

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@contextmanager
def sync_errors() -> Iterator[None]:
    """Every host synchronisation inside the block raises."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def first(items: list[Batch], device: torch.device) -> Batch:
    return items[0]


def gpu_batches(count: int) -> Any:
    """A loader of ready-made batches on the GPU: building them is the loader's business, not
    the loop's, and a pageable host-to-device copy synchronises."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(count):
        x = torch.randn(8, 3, generator=generator)
        batches.append(Batch(x.cuda(), x.sum(1, keepdim=True).cuda()))
    torch.cuda.synchronize()
    return DataLoaderBuilder(first).batch_size(1).build(InMemDataset(batches))


@pytest.mark.parametrize(
    "plan",
    [
        {},
        {"grads_accumulation": 3, "mean_accumulation": True},
        {"clipping": ("norm", 0.5, 2.0), "measure_grad_norm": True},
        {"clipping": ("value", 0.1, 0.0)},
        {"precision": "bf16-mixed"},
    ],
    ids=["plain", "accumulation", "clip-norm", "clip-value", "bf16"],
)
def test_a_training_epoch_makes_no_host_synchronisation(plan: dict[str, Any]) -> None:
    """Two epochs (the first step's checks included) raise nothing under sync-debug "error"."""
    model = TinyRegressor().cuda()
    learner = Learner(model, torch.optim.Adam(model.parameters()), LinearLr(1e-2, 1e-3, 20))
    train, valid = gpu_batches(7), gpu_batches(2)
    spy = SpyProcessor()
    with sync_errors():
        result = run_loop(SingleDevice("cuda"), learner, train, valid, spy, 2, **plan)
    assert result.last_round == 2
    assert sum(1 for _, event in spy.events if type(event).__name__ == "ProcessedItem") == 18
