"""MultiDevice: threads per device, contiguous slices, summed gradients, validation on main."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LearnerModel,
    LinearLr,
    LossMetric,
    MultiDevice,
    RegressionOutput,
    SingleDevice,
    SupervisedLearningStrategy,
    SupervisedTraining,
    TrainOutput,
)
from ember.train._strategy.multi import split_loader
from tests.train.fixtures import (
    Batch,
    TinyRegressor,
    batcher,
    loader,
    read_lines,
    run_loop,
    samples,
)

ITEMS = 23  # slices of 11 and 12 items: batches 4,4,3 and 4,4,4 with batch size 4
BATCH = 4


class SumRegressor(LearnerModel):
    """A small MLP with a sum-reduced loss: per-device gradients add up to the full batch's."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 1))

    def regression(self, batch: Batch) -> RegressionOutput:
        out = self.net(batch.x)
        return RegressionOutput(F.mse_loss(out, batch.y, reduction="sum"), out, batch.y)

    def train_step(self, batch: Batch) -> TrainOutput[RegressionOutput]:
        out = self.regression(batch)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, batch: Batch) -> RegressionOutput:
        return self.regression(batch)


def quiet(directory: Path, train: Any, valid: Any, epochs: int = 3) -> SupervisedTraining:
    return (
        SupervisedTraining(directory, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
    )


def sgd_learner(model: nn.Module) -> Learner[Any]:
    optim = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return Learner(model, optim, LinearLr(0.02, 0.005, 5))


def round_order(items: int, devices: int, batch: int) -> list[int]:
    """Item order of a single loader whose batches are the rounds' device batches joined."""
    step = items // devices
    ranges = [
        list(range(i * step, (i + 1) * step if i < devices - 1 else items)) for i in range(devices)
    ]
    parts = [[r[j : j + batch] for j in range(0, len(r), batch)] for r in ranges]
    return [item for rnd in zip(*parts, strict=True) for part in rnd for item in part]


def loss_values(directory: Path, epoch: int) -> list[float]:
    lines = read_lines(directory / "train" / f"epoch-{epoch}" / "Loss.log")
    assert lines[-1].endswith(",final")
    return [float(line.split(",")[0]) for line in lines[:-1]]


def no_device_threads() -> bool:
    return not any(t.name.startswith("train-device-") for t in threading.enumerate())


def test_protocol_and_repr() -> None:
    """MultiDevice satisfies the strategy protocol and shows its devices."""
    strategy = MultiDevice(["cpu", torch.device("cpu")])
    assert isinstance(strategy, SupervisedLearningStrategy)
    assert strategy.devices == (torch.device("cpu"), torch.device("cpu"))
    assert strategy.main_device == torch.device("cpu")
    assert repr(strategy) == "MultiDevice(['cpu', 'cpu'])"


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

    multi = quiet(tmp_path / "multi", loader(ITEMS, BATCH), valid).with_training_strategy(
        MultiDevice(["cpu", "cpu"])
    )
    joined = [data[i] for i in round_order(ITEMS, 2, BATCH)]
    single_loader = DataLoaderBuilder(batcher).batch_size(2 * BATCH).build(InMemDataset(joined))
    single = quiet(tmp_path / "single", single_loader, loader(8, seed=1))
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
        quiet(tmp_path / "run", loader(ITEMS, BATCH, shuffle=5), loader(8, seed=1), epochs=2)
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
            quiet(tmp_path / name, loader(ITEMS, BATCH, shuffle=3), loader(8, seed=1))
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


def test_events_progress_and_iterations(tmp_path: Path, model: TinyRegressor) -> None:
    """Each round's device outputs come in device order after its step, with the split's
    progress; iterations count device batches; one lr per round."""
    seen: list[tuple[int, int, int, float | None]] = []

    class Spy:
        def process_train(self, event: Any) -> None:
            item = getattr(event, "item", None)
            if item is not None:
                seen.append(
                    (
                        item.iteration,
                        item.progress.items_processed,
                        item.progress.items_total,
                        item.lr,
                    )
                )

        def process_valid(self, event: Any) -> None:
            pass

        def flush(self) -> None:
            pass

        error = None

    learner = Learner(model, torch.optim.SGD(model.parameters()), LinearLr(0.1, 0.01, 10))
    fit = run_loop(MultiDevice(["cpu", "cpu"]), learner, loader(ITEMS, BATCH), loader(8), Spy(), 1)
    assert fit.last_epoch == 1
    lr = [0.1, 0.091, 0.082]
    assert [s[:3] for s in seen] == [
        (1, 8, 23),
        (2, 8, 23),
        (3, 16, 23),
        (4, 16, 23),
        (5, 23, 23),
        (6, 23, 23),
    ]
    assert [s[3] for s in seen] == pytest.approx([lr[0], lr[0], lr[1], lr[1], lr[2], lr[2]])


def test_error_on_a_device_thread_is_the_result_error(tmp_path: Path, model: TinyRegressor) -> None:
    """An exception in train_step on device 1 ends the run in result.error, as raised there,
    with a note naming the device; no device thread survives."""

    def fail_on_device_1(batch: Batch) -> None:
        if threading.current_thread().name == "train-device-1":
            raise RuntimeError("boom on the second replica")

    model.on_train_step = fail_on_device_1
    result = (
        quiet(tmp_path / "run", loader(ITEMS, BATCH), loader(8))
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, RuntimeError)
    assert str(result.error) == "boom on the second replica"
    assert any("device 1" in note and "train-device-1" in note for note in result.error.__notes__)
    assert result.traceback is not None and "fail_on_device_1" in result.traceback
    assert no_device_threads()


def test_data_error_mid_round_joins_the_threads(tmp_path: Path, model: TinyRegressor) -> None:
    """A batcher failing for the second device's slice reaches result.error; threads joined."""

    def flaky(items: list[Any], device: torch.device) -> Batch:
        if items[0][1] == samples(ITEMS)[15][1]:
            raise ValueError("bad item 15")
        return batcher(items, device)

    train = DataLoaderBuilder(flaky).batch_size(BATCH).build(InMemDataset(samples(ITEMS)))
    result = (
        quiet(tmp_path / "run", train, loader(8))
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, ValueError) and "bad item 15" in str(result.error)
    assert no_device_threads()


def test_threads_are_named_and_live_only_during_fit(tmp_path: Path, model: TinyRegressor) -> None:
    """Training runs on train-device-0 and train-device-1, one thread each for the whole fit."""
    names: set[str] = set()
    idents: set[int] = set()

    def spy(batch: Batch) -> None:
        names.add(threading.current_thread().name)
        idents.add(threading.get_ident())

    model.on_train_step = spy
    result = (
        quiet(tmp_path / "run", loader(ITEMS, BATCH, workers=2), loader(8), epochs=2)
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    assert names == {"train-device-0", "train-device-1"}  # the replica shares the hook
    assert len(idents) == 2  # the same two threads for both epochs
    assert no_device_threads()
    assert not any(t.name.startswith("dataloader-") for t in threading.enumerate())


def test_interrupt_stops_after_the_round(tmp_path: Path, model: TinyRegressor) -> None:
    """A stop during training ends the run after the current round (both device batches)."""
    builder = quiet(tmp_path / "run", loader(ITEMS, BATCH), loader(8)).with_training_strategy(
        MultiDevice(["cpu", "cpu"])
    )
    model.on_train_step = lambda batch: builder.interrupter().stop("enough")
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert result.error is None and result.stop_reason == "enough"
    assert len(loss_values(tmp_path / "run", 1)) == 2
    assert no_device_threads()


def test_resume_is_bit_identical(tmp_path: Path) -> None:
    """Checkpoint after epoch 2 and resume: the weights equal an uninterrupted run's (B4)."""

    def run(directory: Path, epochs: int, resume: int | None) -> nn.Module:
        torch.manual_seed(0)
        model = TinyRegressor()
        builder = (
            quiet(directory, loader(ITEMS, BATCH, shuffle=3), loader(8), epochs=epochs)
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
        quiet(tmp_path / "run", loader(ITEMS, BATCH, shuffle=2), loader(8), epochs=2)
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    assert len(seen["train-device-0"]) == len(seen["train-device-1"]) == 6
    for main, replica in zip(seen["train-device-0"], seen["train-device-1"], strict=True):
        assert torch.equal(main, replica)
    assert norm.get_buffer("num_batches_tracked").item() == 6  # the main device's batches


@pytest.mark.parametrize(
    ("devices", "error", "match"),
    [
        ([], ValueError, "at least one device"),
        (["cpu", "not-a-device"], ValueError, r"devices\[1\].*'not-a-device'"),
        (["cpu", 3], TypeError, r"devices\[1\].*3"),
        ("cpu", TypeError, "sequence of devices"),
        (torch.device("cpu"), TypeError, "sequence of devices"),
    ],
)
def test_bad_device_lists_raise(devices: Any, error: type[Exception], match: str) -> None:
    """The device list is checked at construction, naming the bad value."""
    with pytest.raises(error, match=match):
        MultiDevice(devices)


def test_more_devices_than_items(tmp_path: Path, model: TinyRegressor) -> None:
    """Every device needs at least one item: the run fails with a clear error."""
    result = (
        quiet(tmp_path / "run", loader(2), loader(2))
        .with_training_strategy(MultiDevice(["cpu"] * 3))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert isinstance(result.error, ValueError)
    assert "2 items, fewer than the 3 devices" in str(result.error)


def test_split_loader_ranges() -> None:
    """Contiguous ranges as Burn's split_dataloader: the last device takes the remainder."""
    cpu = torch.device("cpu")
    parts: list[DataLoader[Batch]] = split_loader(loader(10, 2), [cpu] * 3)
    assert [part.num_items() for part in parts] == [3, 3, 4]
    firsts = [next(iter(part)).x[0] for part in parts]
    full = [batch.x for batch in loader(10, 1)]
    for first, index in zip(firsts, (0, 3, 6), strict=True):
        assert torch.equal(first, full[index][0])


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
    multi = quiet(tmp_path / "multi", loader(ITEMS, BATCH), loader(8)).with_training_strategy(
        MultiDevice(devices)
    )
    single = quiet(tmp_path / "single", single_loader, loader(8)).with_training_strategy(
        SingleDevice("cuda:0")
    )
    assert multi.launch(sgd_learner(multi_model.cuda())).error is None
    assert single.launch(sgd_learner(single_model.cuda())).error is None
    for a, b in zip(multi_model.parameters(), single_model.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    assert no_device_threads()
