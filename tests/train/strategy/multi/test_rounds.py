"""MultiDevice rounds: threads per device, contiguous slices, events, errors, bad input."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import Learner, LinearLr, MultiDevice, SupervisedLearningStrategy
from ember.train._strategy.multi import split_loader
from tests.train.fixtures import Batch, TinyRegressor, batcher, loader, run_loop, samples
from tests.train.strategy.multi.helpers import (
    BATCH,
    ITEMS,
    loss_run,
    loss_values,
    no_device_threads,
)


def test_protocol_and_repr() -> None:
    """MultiDevice satisfies the strategy protocol and shows its devices."""
    strategy = MultiDevice(["cpu", torch.device("cpu")])
    assert isinstance(strategy, SupervisedLearningStrategy)
    assert strategy.devices == (torch.device("cpu"), torch.device("cpu"))
    assert strategy.main_device == torch.device("cpu")
    assert repr(strategy) == "MultiDevice(['cpu', 'cpu'])"


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
    assert fit.last_round == 1
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
        loss_run(tmp_path / "run", loader(ITEMS, BATCH), loader(8))
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .errors_in_result()
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
        loss_run(tmp_path / "run", train, loader(8))
        .with_training_strategy(MultiDevice(["cpu", "cpu"]))
        .errors_in_result()
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
        loss_run(tmp_path / "run", loader(ITEMS, BATCH, workers=2), loader(8), epochs=2)
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
    builder = loss_run(tmp_path / "run", loader(ITEMS, BATCH), loader(8)).with_training_strategy(
        MultiDevice(["cpu", "cpu"])
    )
    model.on_train_step = lambda batch: builder.interrupter().stop("enough")
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert result.error is None and result.stop_reason == "enough"
    assert len(loss_values(tmp_path / "run", 1)) == 2
    assert no_device_threads()


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
        loss_run(tmp_path / "run", loader(2), loader(2))
        .with_training_strategy(MultiDevice(["cpu"] * 3))
        .errors_in_result()
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
