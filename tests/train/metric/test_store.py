"""Metrics: numeric entries, the built-in metrics, adaptation and the event store."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ember._rundir.metric_logs import format_number
from ember.data import Progress
from ember.extend import (
    AccuracyInput,
    LossInput,
    MetricEntry,
    MetricMetadata,
    MetricState,
    NumericEntry,
    adapt,
    register_adaptor,
)
from ember.train import (
    AccuracyMetric,
    ClassificationOutput,
    Direction,
    FileMetricLogger,
    InMemoryMetricLogger,
    IterationSpeedMetric,
    LossMetric,
    RegressionOutput,
    Split,
)
from ember.train._logger.store import EventStore
from ember.train._vocabulary import Aggregate
from tests.train.fixtures import metric_value

META = MetricMetadata(Progress(1, 1), 1, None)


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_numbers_round_trip_without_exponents(value: float) -> None:
    """format_number reads back exactly and never uses exponent notation."""
    text = format_number(value)
    assert float(text) == value
    assert "e" not in text


def test_number_format_matches_rust_display() -> None:
    """Integral values drop '.0'; NaN and infinities are spelled as Rust does."""
    assert format_number(1.0) == "1"
    assert format_number(1e-7) == "0.0000001"
    assert format_number(4.471280097961426) == "4.471280097961426"
    assert (format_number(math.nan), format_number(-math.inf)) == ("NaN", "-inf")


@given(st.floats(allow_nan=False, allow_infinity=False), st.integers(1, 10_000), st.booleans())
def test_numeric_entry_round_trip(value: float, weight: int, final: bool) -> None:
    """serialize then parse gives back the entry."""
    entry = NumericEntry(value, final=True) if final else NumericEntry(value, weight=weight)
    assert NumericEntry.parse(entry.serialize()) == entry


def test_numeric_entry_rejects_garbage() -> None:
    """A malformed line raises ValueError quoting it."""
    with pytest.raises(ValueError, match="'1,2,3'"):
        NumericEntry.parse("1,2,3")


@given(st.lists(st.integers(1, 9), min_size=1, max_size=12), st.integers(0, 10**6))
def test_accuracy_epoch_value_is_sample_weighted(sizes: list[int], seed: int) -> None:
    """Accuracy over uneven batches equals the accuracy over all samples."""
    generator = torch.Generator().manual_seed(seed)
    metric = AccuracyMetric()
    correct = total = 0
    for size in sizes:
        outputs = torch.randn(size, 3, generator=generator)
        targets = torch.randint(0, 3, (size,), generator=generator)
        metric.update(AccuracyInput(outputs, targets), META)
        correct += int((outputs.argmax(1) == targets).sum())
        total += size
    metric.compute()
    assert metric.final_value().value == pytest.approx(100 * correct / total)


def test_accuracy_with_pad_token_skips_padding() -> None:
    """Pad targets count neither as samples nor as weight."""
    metric = AccuracyMetric(pad_token=9)
    outputs = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    entry = metric.update(AccuracyInput(outputs, torch.tensor([0, 0, 9])), META)
    assert entry.serialized == "50,2"


def test_loss_metric_weights_by_elements() -> None:
    """A scalar loss weighs 1, a per-sample loss weighs its length."""
    metric = LossMetric()
    assert metric.update(LossInput(torch.tensor(2.0)), META).serialized == "2,1"
    assert metric.update(LossInput(torch.tensor([1.0, 2.0, 3.0])), META).serialized == "2,3"
    assert metric.compute().serialized == "2,final"


def test_iteration_speed_restarts_each_epoch() -> None:
    """Speed is measured from each split's first batch; the epoch state resets (unlike Burn)."""
    now = [0.0]
    metric = IterationSpeedMetric(clock=lambda: now[0])
    for t in (0.0, 1.0, 2.0):
        now[0] = t
        metric.update(object(), META)
    assert metric.compute().serialized == "1,final"
    metric.clear()
    for t in (100.0, 100.5, 101.0):
        now[0] = t
        metric.update(object(), META)
    assert metric.compute().serialized == "2,final"


def test_builtin_outputs_adapt_to_builtin_inputs() -> None:
    """ClassificationOutput feeds Loss and Accuracy; RegressionOutput cannot feed Accuracy."""
    out = ClassificationOutput(torch.tensor(1.0), torch.eye(2), torch.tensor([0, 1]))
    assert adapt(out, LossInput).tensor is out.loss
    assert adapt(out, AccuracyInput).targets is out.targets
    regression = RegressionOutput(torch.tensor(1.0), torch.ones(2, 1), torch.ones(2, 1))
    with pytest.raises(TypeError, match="RegressionOutput cannot feed a metric that reads"):
        adapt(regression, AccuracyInput)


@dataclass
class MyOutput:
    my_loss: torch.Tensor

    def adapt(self, input_type: type) -> object:
        return LossInput(self.my_loss) if input_type is LossInput else None


@dataclass
class MyInput:
    mean_prediction: float


def test_user_output_feeds_builtin_metric_and_user_metric_reads_builtin_output() -> None:
    """Both directions work without changing ember: an adapt method, or a registered adaptor."""
    assert adapt(MyOutput(torch.tensor(3.0)), LossInput).tensor.item() == 3.0

    @register_adaptor(RegressionOutput, MyInput)
    def _(output: RegressionOutput) -> MyInput:
        return MyInput(output.output.mean().item())

    regression = RegressionOutput(torch.tensor(1.0), torch.full((2, 1), 4.0), torch.ones(2, 1))
    assert adapt(regression, MyInput) == MyInput(4.0)


@pytest.mark.parametrize("make_logger", [FileMetricLogger, lambda _: InMemoryMetricLogger()])
def test_event_store_queries(tmp_path: Path, make_logger: object) -> None:
    """find_metric reads the final line, else the weighted mean; find_epoch keeps ties early."""
    store = EventStore([make_logger(tmp_path)])  # type: ignore[operator]
    for epoch, lines in enumerate([["3,1", "1,1", "2,final"], ["1,1", "2,3"], ["1,final"]], 1):
        store.start_split(Split.VALID, epoch)
        store.log(Split.VALID, [MetricState(MetricEntry("Loss", "", line)) for line in lines], 0)
        store.end_split(Split.VALID)
    assert store.find_metric("Loss", 1, Split.VALID) == 2.0
    assert store.find_metric("Loss", 2, Split.VALID) == 1.75
    assert store.find_metric("Loss", 4, Split.VALID) is None
    assert store.find_epoch("Loss", Direction.LOWEST, Split.VALID) == 3
    assert store.find_epoch("Loss", Direction.HIGHEST, Split.VALID) == 1
    assert store.find_epoch("Accuracy", Direction.HIGHEST, Split.VALID) is None
    store.close()  # stops the file logger's metric-writer


def test_in_memory_logger_keys_by_real_epoch() -> None:
    """After a resume at epoch 3, epoch 3's values are found under epoch 3 (Burn's are not)."""
    logger = InMemoryMetricLogger()
    logger.log([metric_value("Loss", NumericEntry(5.0, final=True), 3)])
    assert logger.read_numeric("Loss", 3, Split.TRAIN) == [NumericEntry(5.0, final=True)]
    assert logger.read_numeric("Loss", 1, Split.TRAIN) == []


def test_file_logger_restarts_a_rerun_epoch(tmp_path: Path) -> None:
    """Logging an epoch again (after a resume) replaces its file instead of appending."""
    logger = FileMetricLogger(tmp_path)
    for _ in range(2):
        logger.log([metric_value("Loss", NumericEntry(1.0, 1), 2)])
        logger.end_split(2, Split.TRAIN)
    logger.close()
    assert (tmp_path / "train" / "epoch-2" / "Loss.log").read_text() == "1,1\n"


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_file_logger_hands_a_new_file_to_the_writer_with_its_first_line(tmp_path: Path) -> None:
    """A new epoch's file is made while training goes on: its first line goes to the writer at
    once, later lines only when the interval has passed (or at a sync)."""
    clock = ManualClock()
    logger = FileMetricLogger(tmp_path, interval=10.0, clock=clock)
    path = tmp_path / "train" / "epoch-1" / "Loss.log"
    logger.log([metric_value("Loss", NumericEntry(1.0, 1), 1)])
    logger._writer.flush()  # what was handed over is written; nothing else is handed over
    assert path.read_text() == "1,1\n"
    logger.log([metric_value("Loss", NumericEntry(2.0, 1), 1)])
    logger._writer.flush()
    assert path.read_text() == "1,1\n"  # held until the interval passes
    clock.now = 10.0
    logger.log([metric_value("Loss", NumericEntry(3.0, 1), 1)])
    logger.close()
    assert path.read_text() == "1,1\n2,1\n3,1\n"


@given(st.lists(st.floats(allow_infinity=False), min_size=1, max_size=40), st.integers(1, 5))
def test_find_epoch_asked_every_epoch_matches_a_full_scan(values: list[float], every: int) -> None:
    """find_epoch keeps only its best so far, yet answers as a scan of every epoch would, NaN
    never winning and ties keeping the earliest, however often it is asked."""
    store = EventStore([InMemoryMetricLogger()])
    for epoch, value in enumerate(values, 1):
        store.start_split(Split.VALID, epoch)
        store.log(
            Split.VALID, [MetricState(MetricEntry("Loss", "", f"{format_number(value)},final"))], 0
        )
        store.end_split(Split.VALID)
        if epoch % every == 0 or epoch == len(values):
            for direction in (Direction.LOWEST, Direction.HIGHEST):
                finite = [(v, e) for e, v in enumerate(values[:epoch], 1) if not math.isnan(v)]
                pick = min if direction is Direction.LOWEST else max
                best = None
                if finite:
                    target = pick(v for v, _ in finite)
                    best = next(e for v, e in finite if v == target)
                assert store.find_epoch("Loss", direction, Split.VALID) == best


def test_event_store_memory_is_bounded_over_epochs(tmp_path: Path) -> None:
    """3,000 epochs of two metrics on both splits, each asked for every epoch: the store's
    cache and the file logger's bookkeeping stay bounded."""
    logger = FileMetricLogger(tmp_path, interval=0.0)
    store = EventStore([logger])
    for epoch in range(1, 3001):
        for split in (Split.TRAIN, Split.VALID):
            store.start_split(split, epoch)
            store.log(
                split, [MetricState(MetricEntry(n, "", "1,1")) for n in ("Loss", "Accuracy")], 0
            )
            store.log(
                split,
                [
                    MetricState(MetricEntry(n, "", f"{epoch % 7},final"))
                    for n in ("Loss", "Accuracy")
                ],
                0,
            )
            store.end_split(split)
        if epoch % 100 == 0:
            assert store.find_epoch("Loss", Direction.LOWEST, Split.VALID) == 7
            assert store.find_metric("Loss", epoch, Split.TRAIN) == epoch % 7
    store.close()
    assert len(store._cache) <= 256
    assert len(logger._started) + len(logger._paths) + len(logger._pending) <= 8
    assert logger.read_numeric("Loss", 3000, Split.VALID)[-1] == NumericEntry(4, final=True)


def test_queries_in_0_1_0s_form_with_an_aggregate_answer_the_same() -> None:
    """``find_metric(name, epoch, Aggregate.MEAN, split)`` and ``find_epoch(name,
    Aggregate.MEAN, direction, split)``, as 0.1.0's strategies asked, give the new answers."""
    store = EventStore([InMemoryMetricLogger()])
    for epoch, value in enumerate([3.0, 1.0, 2.0], 1):
        store.start_split(Split.VALID, epoch)
        store.log(Split.VALID, [MetricState(MetricEntry("Loss", "", f"{value},final"))], 0)
        store.end_split(Split.VALID)
    with pytest.warns(DeprecationWarning, match="find_metric: the Aggregate argument"):
        assert store.find_metric("Loss", 2, Aggregate.MEAN, Split.VALID) == 1.0  # type: ignore[arg-type]
    with pytest.warns(DeprecationWarning, match="find_epoch: the Aggregate argument"):
        best = store.find_epoch("Loss", Aggregate.MEAN, Direction.LOWEST, Split.VALID)  # type: ignore[arg-type]
    assert best == store.find_epoch("Loss", Direction.LOWEST, Split.VALID) == 2
