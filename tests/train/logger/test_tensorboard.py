"""TensorBoardLogger: scalars read back with TensorBoard's own event reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.extend import MetricDefinition, MetricEntry, MetricLogger, NumericEntry
from ember.train import Split, TensorBoardLogger
from ember.train._metric.store import EventStore

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def entry(name: str, value: NumericEntry) -> MetricEntry:
    return MetricEntry(name, "shown", value.serialize())


def scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar series in ``log_dir`` as (step, value) pairs."""
    accumulator = event_accumulator.EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_batch_and_epoch_scalars_at_their_steps(tmp_path: Path) -> None:
    """Batch values at a per-split step counted across epochs; epoch values at step = epoch."""
    log_dir = tmp_path / "tb"
    logger = TensorBoardLogger(log_dir)
    store = EventStore([logger])
    # values exact in float32, which is how TensorBoard stores them
    train = {1: [4.0, 3.5, 3.0], 2: [2.5, 2.0]}
    for epoch, values in train.items():
        store.start_split(Split.TRAIN, epoch)
        for value in values:
            store.log(
                Split.TRAIN,
                [entry("Loss", NumericEntry(value, 1)), entry("Accuracy", NumericEntry(50.0, 4))],
            )
        store.log(
            Split.TRAIN,
            [
                entry("Loss", NumericEntry(sum(values) / len(values), final=True)),
                entry("Accuracy", NumericEntry(50.0, final=True)),
            ],
        )
        store.end_split(Split.TRAIN)
        store.start_split(Split.VALID, epoch)
        store.log(Split.VALID, [entry("Loss", NumericEntry(1.0 / epoch, 2))])
        store.log(Split.VALID, [entry("Loss", NumericEntry(1.0 / epoch, final=True))])
        store.end_split(Split.VALID)
    store.close()

    assert scalars(log_dir) == {
        "train/Loss": [(1, 4.0), (2, 3.5), (3, 3.0), (4, 2.5), (5, 2.0)],
        "train/Accuracy": [(step, 50.0) for step in range(1, 6)],
        "train/Loss/epoch": [(1, 3.5), (2, 2.25)],
        "train/Accuracy/epoch": [(1, 50.0), (2, 50.0)],
        "valid/Loss": [(1, 1.0), (2, 0.5)],
        "valid/Loss/epoch": [(1, 1.0), (2, 0.5)],
    }


def test_skips_text_and_unavailable_entries(tmp_path: Path) -> None:
    """Only numeric, available entries become scalars."""
    logger = TensorBoardLogger(tmp_path)
    logger.log_definition(MetricDefinition("Tokens"))  # no attributes: not numeric
    logger.log(
        [
            MetricEntry("Text", "hi", "hello world"),
            MetricEntry("Pending", "", MetricEntry.NOT_AVAILABLE),
            MetricEntry("Tokens", "12", "12"),
            entry("Loss", NumericEntry(0.5, 1)),
        ],
        1,
        Split.TRAIN,
    )
    logger.end_split(1, Split.TRAIN)
    logger.close()
    logger.close()  # a second close does nothing
    assert scalars(tmp_path) == {"train/Loss": [(1, 0.5)]}


def test_is_write_only(tmp_path: Path) -> None:
    """read_numeric answers [], so the event store asks the next logger."""
    logger = TensorBoardLogger(tmp_path)
    assert isinstance(logger, MetricLogger)
    logger.log([entry("Loss", NumericEntry(0.5, 1))], 1, Split.TRAIN)
    assert logger.read_numeric("Loss", 1, Split.TRAIN) == []
    logger.close()


def test_rejects_a_file(tmp_path: Path) -> None:
    """A log_dir that is a file fails at construction, naming it."""
    path = tmp_path / "file"
    path.write_text("x")
    with pytest.raises(ValueError, match="log_dir is a file"):
        TensorBoardLogger(path)
