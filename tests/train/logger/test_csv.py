"""CsvMetricLogger: one CSV file that reads back exactly and serves the event store."""

from __future__ import annotations

from pathlib import Path

import pytest

from ember.extend import MetricEntry, MetricLogger, MetricReader, MetricState, NumericEntry
from ember.train import CsvMetricLogger, Direction, Split
from ember.train._logger.store import EventStore
from tests.train.fixtures import metric_value


def state(name: str, value: NumericEntry) -> MetricState:
    return MetricState(MetricEntry(name, "shown", value.serialize()), value)


BATCHES = {
    (Split.TRAIN, 1): [NumericEntry(4.471280097961426, 1), NumericEntry(3.5, 8)],
    (Split.TRAIN, 2): [NumericEntry(0.1, 1), NumericEntry(1e-7, 2), NumericEntry(2.0)],
    (Split.VALID, 1): [NumericEntry(2.25, 3)],
    (Split.VALID, 2): [NumericEntry(1.125, 3)],
}
FINALS = {
    (Split.TRAIN, 1): NumericEntry(4.484403473990304, final=True),
    (Split.TRAIN, 2): NumericEntry(0.7, final=True),
    (Split.VALID, 1): NumericEntry(2.25, final=True),
    (Split.VALID, 2): NumericEntry(1.125, final=True),
}


def log_run(logger: CsvMetricLogger, epochs: tuple[int, ...] = (1, 2)) -> None:
    """Each train batch one optimizer step (epoch 1: steps 1, 2; epoch 2: steps 3, 4, 5); an
    epoch value and the validation at the step of the training before them."""
    step = 0
    for epoch in epochs:
        for split in (Split.TRAIN, Split.VALID):
            for value in BATCHES[(split, epoch)]:
                step += split is Split.TRAIN
                logger.log([metric_value("Loss", value, epoch, split, step)])
            logger.log([metric_value("Loss", FINALS[(split, epoch)], epoch, split, step)])
            logger.end_split(epoch, split)


def test_round_trip_includes_final_entries(tmp_path: Path) -> None:
    """read_numeric gives back every batch entry and the final one, also from a new logger."""
    path = tmp_path / "metrics.csv"
    logger = CsvMetricLogger(path)
    log_run(logger)
    for (split, epoch), batches in BATCHES.items():
        expected = [*batches, FINALS[(split, epoch)]]
        assert logger.read_numeric("Loss", epoch, split) == expected
    logger.close()
    reread = CsvMetricLogger(path)
    for (split, epoch), batches in BATCHES.items():
        assert reread.read_numeric("Loss", epoch, split) == [*batches, FINALS[(split, epoch)]]
    assert reread.read_numeric("Loss", 3, Split.TRAIN) == []
    assert reread.read_numeric("Accuracy", 1, Split.TRAIN) == []


def test_read_numeric_takes_the_split_as_a_string(tmp_path: Path) -> None:
    """The user's call: read_numeric("Loss", 1, "valid"), as FileMetricLogger and the other
    places that take a Split accept (it found nothing); a wrong name is a clear error."""
    logger = CsvMetricLogger(tmp_path / "metrics.csv")
    log_run(logger)
    assert logger.read_numeric("Loss", 1, "valid") == [
        *BATCHES[(Split.VALID, 1)],
        FINALS[(Split.VALID, 1)],
    ]
    with pytest.raises(
        ValueError, match="split must be one of 'train', 'valid', 'test', got 'validation'"
    ):
        logger.read_numeric("Loss", 1, "validation")
    logger.close()


def test_file_layout(tmp_path: Path) -> None:
    """Header, one row per entry, numbers as the metric logs write them, kind batch|epoch."""
    path = tmp_path / "logs" / "metrics.csv"
    logger = CsvMetricLogger(path)
    log_run(logger, epochs=(1,))
    logger.close()
    assert path.read_text(encoding="utf-8").splitlines() == [
        "epoch,step,split,metric,value,weight,kind",
        "1,1,train,Loss,4.471280097961426,1,batch",
        "1,2,train,Loss,3.5,8,batch",
        "1,2,train,Loss,4.484403473990304,,epoch",
        "1,2,valid,Loss,2.25,3,batch",
        "1,2,valid,Loss,2.25,,epoch",
    ]


def test_a_file_without_the_step_column_is_continued_in_its_columns(tmp_path: Path) -> None:
    """A file an older ember wrote (no step column) reads back, and a resumed run appends rows
    in its columns (and drops its re-run epoch's rows) instead of mixing two layouts."""
    path = tmp_path / "metrics.csv"
    path.write_text(
        "epoch,split,metric,value,weight,kind\n"
        "1,train,Loss,4.471280097961426,1,batch\n"
        "1,train,Loss,4.471280097961426,,epoch\n"
        "2,train,Loss,9,1,batch\n",
        encoding="utf-8",
    )
    logger = CsvMetricLogger(path)
    assert logger.read_numeric("Loss", 1, Split.TRAIN) == [
        NumericEntry(4.471280097961426, 1),
        NumericEntry(4.471280097961426, final=True),
    ]
    logger.log([metric_value("Loss", NumericEntry(0.5, 2), 2, Split.TRAIN, step=7)])
    logger.end_split(2, Split.TRAIN)
    logger.close()
    assert path.read_text(encoding="utf-8").splitlines() == [
        "epoch,split,metric,value,weight,kind",
        "1,train,Loss,4.471280097961426,1,batch",
        "1,train,Loss,4.471280097961426,,epoch",
        "2,train,Loss,0.5,2,batch",
    ]
    assert CsvMetricLogger(path).read_numeric("Loss", 2, Split.TRAIN) == [NumericEntry(0.5, 2)]


def test_rows_are_buffered_until_the_split_ends(tmp_path: Path) -> None:
    """Nothing reaches the file before end_split; everything does after it."""
    path = tmp_path / "metrics.csv"
    logger = CsvMetricLogger(path)
    logger.log([metric_value("Loss", NumericEntry(1.0, 1), 1, Split.TRAIN)])
    assert not path.exists()
    logger.end_split(1, Split.TRAIN)
    assert path.read_text(encoding="utf-8").splitlines()[1:] == ["1,0,train,Loss,1,1,batch"]
    logger.close()
    logger.close()  # a second close does nothing


def test_only_numeric_available_entries_are_written(tmp_path: Path) -> None:
    """Through the event store, text metrics and N/A entries are skipped, a metric that is not
    numeric but logs a number is written; odd names are quoted and read back."""
    path = tmp_path / "metrics.csv"
    logger = CsvMetricLogger(path)
    store = EventStore([logger])
    store.start_split(Split.TRAIN, 1)
    store.log(
        Split.TRAIN,
        [
            MetricState(MetricEntry("Text", "hello", "hello world")),
            MetricState(MetricEntry("Pending", "", MetricEntry.NOT_AVAILABLE)),
            MetricState(MetricEntry("Tokens", "12", "12")),
            state('Loss, "smoothed"', NumericEntry(0.5, 2)),
        ],
        step=3,
    )
    store.end_split(Split.TRAIN)
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    assert rows == ["1,3,train,Tokens,12,,batch", '1,3,train,"Loss, ""smoothed""",0.5,2,batch']
    assert logger.read_numeric('Loss, "smoothed"', 1, Split.TRAIN) == [NumericEntry(0.5, 2)]
    logger.close()


def test_only_logger_of_an_event_store(tmp_path: Path) -> None:
    """find_metric and find_epoch work with the CSV logger alone."""
    logger = CsvMetricLogger(tmp_path / "metrics.csv")
    store = EventStore([logger])
    finals = [3.0, 1.5, 1.5, 2.0]
    for epoch, final in enumerate(finals, start=1):
        store.start_split(Split.VALID, epoch)
        store.log(Split.VALID, [state("Loss", NumericEntry(final + 1, 1))], epoch)
        store.log(Split.VALID, [state("Loss", NumericEntry(final, final=True))], epoch)
        store.end_split(Split.VALID)
    assert [store.find_metric("Loss", e, Split.VALID) for e in (1, 2, 4)] == [
        3.0,
        1.5,
        2.0,
    ]
    assert store.find_epoch("Loss", Direction.LOWEST, Split.VALID) == 2
    assert store.find_epoch("Loss", Direction.HIGHEST, Split.VALID) == 1
    assert store.find_epoch("Loss", Direction.LOWEST, Split.TRAIN) is None
    store.close()


def test_resumed_run_replaces_the_rerun_epoch(tmp_path: Path) -> None:
    """An epoch logged again drops that split's rows from it on; earlier epochs stay."""
    path = tmp_path / "metrics.csv"
    first = CsvMetricLogger(path)
    log_run(first)
    first.close()

    resumed = CsvMetricLogger(path)
    resumed.log([metric_value("Loss", NumericEntry(9.0, 1), 2, Split.TRAIN)])
    resumed.log([metric_value("Loss", NumericEntry(9.0, final=True), 2, Split.TRAIN)])
    resumed.end_split(2, Split.TRAIN)
    assert resumed.read_numeric("Loss", 2, Split.TRAIN) == [
        NumericEntry(9.0, 1),
        NumericEntry(9.0, final=True),
    ]
    assert resumed.read_numeric("Loss", 1, Split.TRAIN) == [
        *BATCHES[(Split.TRAIN, 1)],
        FINALS[(Split.TRAIN, 1)],
    ]
    # valid epoch 2 has not been re-run yet: its rows are still there
    assert resumed.read_numeric("Loss", 2, Split.VALID)[-1] == FINALS[(Split.VALID, 2)]
    resumed.close()
    text = path.read_text(encoding="utf-8")
    assert text.count("epoch,step,split,metric") == 1
    assert "0.7,,epoch" not in text


def test_rejects_a_directory_and_a_foreign_file(tmp_path: Path) -> None:
    """Bad paths fail at construction, naming the path."""
    with pytest.raises(ValueError, match="is a directory"):
        CsvMetricLogger(tmp_path)
    other = tmp_path / "other.csv"
    other.write_text("a,b,c\n1,2,3\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"other\.csv.*not a CSV metric log"):
        CsvMetricLogger(other)


def test_satisfies_the_protocol(tmp_path: Path) -> None:
    """CsvMetricLogger is a MetricLogger and a MetricReader."""
    logger = CsvMetricLogger(tmp_path / "m.csv")
    assert isinstance(logger, MetricLogger)
    assert isinstance(logger, MetricReader)
