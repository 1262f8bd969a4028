"""TensorBoardLogger: scalars read back with TensorBoard's own event reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.extend import MetricEntry, MetricLogger, MetricReader, MetricState, NumericEntry
from ember.train import Split, TensorBoardLogger
from ember.train._logger.store import EventStore
from tests.train.fixtures import metric_value

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def state(name: str, value: NumericEntry) -> MetricState:
    return MetricState(MetricEntry(name, "shown", value.serialize()), value)


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in ``log_dir`` as (step, value) pairs."""
    accumulator = event_accumulator.EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_batch_and_epoch_scalars_at_their_steps(tmp_path: Path) -> None:
    """Train batch values at the global step; the valid epoch value at the step it followed;
    epoch values at step = epoch; the configuration as text."""
    log_dir = tmp_path / "tb"
    logger = TensorBoardLogger(log_dir)
    store = EventStore([logger])
    store.start({"num_epochs": 2})
    # values exact in float32, which is how TensorBoard stores them
    train = {1: [4.0, 3.5, 3.0], 2: [2.5, 2.0]}
    step = 10  # a resumed run: steps go on from the checkpoint's
    for epoch, values in train.items():
        store.start_split(Split.TRAIN, epoch)
        for value in values:
            step += 1
            store.log(
                Split.TRAIN,
                [state("Loss", NumericEntry(value, 1)), state("Accuracy", NumericEntry(50.0, 4))],
                step,
            )
        mean = sum(values) / len(values)
        finals = [state("Loss", NumericEntry(mean, final=True))]
        store.log(Split.TRAIN, [*finals, state("Accuracy", NumericEntry(50.0, final=True))], step)
        store.end_split(Split.TRAIN)
        store.start_split(Split.VALID, epoch)
        for _ in range(2):  # a validation pass does not step: its batches are not written
            store.log(Split.VALID, [state("Loss", NumericEntry(9.0, 2))], step)
        store.log(Split.VALID, [state("Loss", NumericEntry(1.0 / epoch, final=True))], step)
        store.end_split(Split.VALID)
    store.close()

    assert scalars(log_dir) == {
        "train/Loss": [(11, 4.0), (12, 3.5), (13, 3.0), (14, 2.5), (15, 2.0)],
        "train/Accuracy": [(step, 50.0) for step in range(11, 16)],
        "train/Loss/epoch": [(1, 3.5), (2, 2.25)],
        "train/Accuracy/epoch": [(1, 50.0), (2, 50.0)],
        "valid/Loss": [(13, 1.0), (15, 0.5)],
        "valid/Loss/epoch": [(1, 1.0), (2, 0.5)],
    }
    accumulator = event_accumulator.EventAccumulator(str(log_dir))
    accumulator.Reload()
    assert "config/text_summary" in accumulator.Tags()["tensors"]


def test_skips_text_and_unavailable_entries(tmp_path: Path) -> None:
    """Only numeric, available entries become scalars."""
    logger = TensorBoardLogger(tmp_path)
    store = EventStore([logger])
    store.start_split(Split.TRAIN, 1)
    store.log(
        Split.TRAIN,
        [
            MetricState(MetricEntry("Text", "hi", "hello world")),
            MetricState(MetricEntry("Pending", "", MetricEntry.NOT_AVAILABLE)),
            state("Loss", NumericEntry(0.5, 1)),
        ],
        1,
    )
    store.end_split(Split.TRAIN)
    logger.close()
    logger.close()  # a second close does nothing
    assert scalars(tmp_path) == {"train/Loss": [(1, 0.5)]}


def test_is_write_only(tmp_path: Path) -> None:
    """A MetricLogger, not a MetricReader: the event store never asks it."""
    logger = TensorBoardLogger(tmp_path)
    assert isinstance(logger, MetricLogger)
    assert not isinstance(logger, MetricReader)
    logger.log([metric_value("Loss", NumericEntry(0.5, 1))])
    assert EventStore([logger]).readers == []
    logger.close()


def test_rejects_a_file(tmp_path: Path) -> None:
    """A log_dir that is a file fails at construction, naming it."""
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(ValueError, match="log_dir is a file"):
        TensorBoardLogger(path)
