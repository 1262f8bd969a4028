"""MultiDevice equals one device fed each round's batches joined, resumes bit for bit, and
keeps every replica's buffers the main model's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import Learner, MultiDevice, SingleDevice
from ember.train._strategy.multi import split_loader
from tests.train.fixtures import TinyRegressor, batcher, loader, read_lines, samples
from tests.train.strategy.multi.helpers import (
    BATCH,
    ITEMS,
    SumRegressor,
    loss_run,
    loss_values,
    no_device_threads,
    round_order,
    sgd_learner,
)


@pytest.mark.parametrize("accumulation", [None, 2])
def test_equals_single_device_with_the_joined_batches(
    tmp_path: Path, accumulation: int | None
) -> None:
    """Two CPU replicas equal one device fed each round's batches joined (sum-reduced loss)."""
    torch.manual_seed(0)
    multi_model = SumRegressor()
    single_model = SumRegressor()
    single_model.load_state_dict(multi_model.state_dict())
    data = samples(ITEMS)
    valid = loader(8, seed=1)

    multi = loss_run(tmp_path / "multi", loader(ITEMS, BATCH), valid).with_training_strategy(
        MultiDevice(["cpu", "cpu"])
    )
    joined = [data[i] for i in round_order(ITEMS, 2, BATCH)]
    single_loader = DataLoaderBuilder(batcher).batch_size(2 * BATCH).build(InMemDataset(joined))
    single = loss_run(tmp_path / "single", single_loader, loader(8, seed=1))
    if accumulation is not None:
        multi = multi.grads_accumulation(accumulation)
        single = single.grads_accumulation(accumulation)

    multi_result = multi.launch(sgd_learner(multi_model))
    single_result = single.launch(sgd_learner(single_model))
    assert multi_result.error is None, multi_result.traceback
    assert single_result.error is None, single_result.traceback

    for (name, a), (_, b) in zip(
        multi_model.state_dict().items(), single_model.state_dict().items(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6, msg=name)
    for epoch in (1, 2, 3):
        per_device = loss_values(tmp_path / "multi", epoch)
        per_round = loss_values(tmp_path / "single", epoch)
        assert len(per_device) == 6 and len(per_round) == 3  # a log line for every device batch
        joined_losses = [a + b for a, b in zip(per_device[::2], per_device[1::2], strict=True)]
        assert joined_losses == pytest.approx(per_round, rel=1e-5)
    for epoch in (1, 2, 3):  # validation: the main model, every batch of the valid loader
        valid_path = Path("valid") / f"epoch-{epoch}" / "Loss.log"
        multi_valid = read_lines(tmp_path / "multi" / valid_path)
        single_valid = read_lines(tmp_path / "single" / valid_path)
        assert len(multi_valid) == len(single_valid) == 3
        assert [float(x.split(",")[0]) for x in multi_valid] == pytest.approx(
            [float(x.split(",")[0]) for x in single_valid], rel=1e-5
        )
    assert no_device_threads()


def test_shuffled_slices_equal_a_hand_loop_with_summed_mean_losses(
    tmp_path: Path, model: TinyRegressor
) -> None:
    """With shuffling and mean-reduced losses, each step applies the sum of the devices'
    gradients; the slices shuffle with their own streams, as ``split_loader`` builds them."""
    reference = TinyRegressor()
    reference.load_state_dict(model.state_dict())
    result = (
        loss_run(tmp_path / "run", loader(ITEMS, BATCH, shuffle=5), loader(8, seed=1), epochs=2)
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.05))
    )
    assert result.error is None, result.traceback

    optim = torch.optim.SGD(reference.parameters(), lr=0.05)
    slices = split_loader(loader(ITEMS, BATCH, shuffle=5), [torch.device("cpu")] * 2)
    assert [part.num_items() for part in slices] == [11, 12]
    losses = []
    for _ in range(2):
        for first, second in zip(*slices, strict=True):
            optim.zero_grad(set_to_none=True)
            pair = [reference.regression(first).loss, reference.regression(second).loss]
            torch.autograd.backward(pair[0] + pair[1])
            optim.step()
            losses += [loss.item() for loss in pair]
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    logged = loss_values(tmp_path / "run", 1) + loss_values(tmp_path / "run", 2)
    assert logged == pytest.approx(losses, rel=1e-5)


def test_one_device_is_single_device_bit_for_bit(tmp_path: Path) -> None:
    """MultiDevice(['cpu']) trains exactly like SingleDevice('cpu'): weights and logs."""
    runs = []
    for name, strategy in (("single", SingleDevice("cpu")), ("multi", MultiDevice(["cpu"]))):
        torch.manual_seed(0)
        model = TinyRegressor()
        result = (
            loss_run(tmp_path / name, loader(ITEMS, BATCH, shuffle=3), loader(8, seed=1))
            .with_training_strategy(strategy)
            .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
        )
        assert result.error is None, result.traceback
        runs.append(model)
    for a, b in zip(runs[0].state_dict().values(), runs[1].state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for split in ("train", "valid"):
        for epoch in (1, 2, 3):
            path = Path(split) / f"epoch-{epoch}" / "Loss.log"
            assert read_lines(tmp_path / "single" / path) == read_lines(tmp_path / "multi" / path)


def test_resume_is_bit_identical(tmp_path: Path) -> None:
    """Checkpoint after epoch 2 and resume: the weights equal an uninterrupted run's."""

    def run(directory: Path, epochs: int, resume: int | None) -> nn.Module:
        torch.manual_seed(0)
        model = TinyRegressor()
        builder = (
            loss_run(directory, loader(ITEMS, BATCH, shuffle=3), loader(8), epochs=epochs)
            .with_training_strategy(MultiDevice(["cpu", "cpu"]))
            .with_default_checkpointers()
        )
        if resume is not None:
            builder = builder.checkpoint(resume)
        result = builder.launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
        assert result.error is None, result.traceback
        return model

    straight = run(tmp_path / "straight", 3, None)
    run(tmp_path / "resumed", 2, None)
    resumed = run(tmp_path / "resumed", 3, 2)
    for a, b in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    for epoch in (1, 2, 3):
        assert loss_values(tmp_path / "straight", epoch) == loss_values(tmp_path / "resumed", epoch)


def test_buffers_follow_the_main_model(tmp_path: Path) -> None:
    """Every round starts with the main model's buffers on every replica (BatchNorm running
    statistics follow the main device's batches)."""
    torch.manual_seed(0)
    norm = nn.BatchNorm1d(3)
    model = TinyRegressor(nn.Sequential(norm, nn.Linear(3, 1)))
    seen: dict[str, list[torch.Tensor]] = {"train-device-0": [], "train-device-1": []}

    def record(module: nn.Module, args: Any) -> None:
        name = threading.current_thread().name
        if name in seen:
            seen[name].append(module.get_buffer("running_mean").clone())

    norm.register_forward_pre_hook(record)  # copied to the replica with the module
    result = (
        loss_run(tmp_path / "run", loader(ITEMS, BATCH, shuffle=2), loader(8), epochs=2)
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    assert len(seen["train-device-0"]) == len(seen["train-device-1"]) == 6
    for main, replica in zip(seen["train-device-0"], seen["train-device-1"], strict=True):
        assert torch.equal(main, replica)
    assert norm.get_buffer("num_batches_tracked").item() == 6  # the main device's batches


@pytest.mark.gpu
@pytest.mark.parametrize(
    "devices",
    [
        pytest.param(
            ["cuda", "cuda"],
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ),
        pytest.param(
            ["cuda:0", "cuda:1"],
            marks=pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA devices"),
        ),
    ],
)
def test_cuda_devices_equal_one_with_the_joined_batches(tmp_path: Path, devices: list[str]) -> None:
    """On CUDA, weights match a single GPU fed the joined batches (float tolerance)."""
    torch.manual_seed(0)
    multi_model, single_model = SumRegressor(), SumRegressor()
    single_model.load_state_dict(multi_model.state_dict())
    data = samples(ITEMS)
    joined = [data[i] for i in round_order(ITEMS, 2, BATCH)]
    single_loader = DataLoaderBuilder(batcher).batch_size(2 * BATCH).build(InMemDataset(joined))
    multi = loss_run(tmp_path / "multi", loader(ITEMS, BATCH), loader(8)).with_training_strategy(
        MultiDevice(devices)
    )
    single = loss_run(tmp_path / "single", single_loader, loader(8)).with_training_strategy(
        SingleDevice("cuda:0")
    )
    assert multi.launch(sgd_learner(multi_model.cuda())).error is None
    assert single.launch(sgd_learner(single_model.cuda())).error is None
    for a, b in zip(multi_model.parameters(), single_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert no_device_threads()
