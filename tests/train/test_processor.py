"""The event processors: chunked hand-over to ``train-worker``, loss read-back, log lines."""

from __future__ import annotations

import io
import logging
import threading
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ember._errors import NonFiniteLossError
from ember.data import Progress
from ember.extend import EndSplit, ProcessedItem, StartSplit
from ember.train import (
    CliMetricsRenderer,
    InMemoryMetricLogger,
    LossMetric,
    RegressionOutput,
    Split,
    TrainingItem,
)
from ember.train._logger.store import EventStore
from ember.train._metric.registered import MetricsTraining
from ember.train._processor import (
    AsyncProcessorTraining,
    FullEventProcessorTraining,
)


class RecordingProcessor:
    """Stands in for FullEventProcessorTraining: records chunks and the thread that got them."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.chunks: list[list[Any]] = []
        self.threads: set[str] = set()
        self.renderer = CliMetricsRenderer(io.StringIO())
        self.gate = gate

    def process_chunk(self, chunk: Sequence[tuple[Split, Any]]) -> None:
        if self.gate is not None:
            self.gate.wait(10)
        self.threads.add(threading.current_thread().name)
        self.chunks.append([event for _, event in chunk])

    def log_progress(self) -> None:
        pass


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def item(iteration: int, loss: torch.Tensor | None = None) -> ProcessedItem[RegressionOutput]:
    loss = torch.tensor(float(iteration)) if loss is None else loss
    output = RegressionOutput(loss, loss.reshape(-1, 1), loss.reshape(-1, 1))
    return ProcessedItem(TrainingItem(output, Progress(iteration, 100), iteration, 0.1))


@given(st.integers(1, 40), st.integers(1, 8))
def test_events_arrive_in_order_in_bounded_chunks_on_train_worker(
    count: int, max_chunk: int
) -> None:
    """Whatever the chunk size, flush() is a FIFO barrier and every chunk is at most max_chunk."""
    recorder = RecordingProcessor()
    processor = AsyncProcessorTraining(recorder, max_chunk=max_chunk, clock=ManualClock())  # type: ignore[arg-type]
    events = [item(i) for i in range(1, count + 1)]
    for event in events:
        processor.process_train(event)
    processor.flush()
    assert [e for chunk in recorder.chunks for e in chunk] == events
    assert all(len(chunk) <= max_chunk for chunk in recorder.chunks)
    assert recorder.threads == {"train-worker"}
    processor.close()


def test_pending_events_wait_for_the_delay_or_a_flush() -> None:
    """Below max_chunk, events stay on the training side until max_delay has passed."""
    recorder = RecordingProcessor()
    clock = ManualClock()
    processor = AsyncProcessorTraining(recorder, max_delay=0.05, clock=clock)  # type: ignore[arg-type]
    processor.process_train(item(1))
    processor.flush()
    processor.process_train(item(2))
    clock.now = 0.049
    processor.process_train(item(3))
    assert len(recorder.chunks) == 1  # nothing new handed over yet
    clock.now = 0.05
    processor.process_train(item(4))
    processor.flush()
    assert [[e.item.iteration for e in chunk] for chunk in recorder.chunks] == [[1], [2, 3, 4]]
    processor.close()


def test_a_full_chunk_for_an_idle_worker_is_taken_before_the_training_thread_goes_on() -> None:
    """Handing a full chunk to an idle worker returns once the worker holds it, so the worker never
    has to fight the training thread for the GIL to start (the queue is empty again)."""
    gate = threading.Event()
    gate.set()
    recorder = RecordingProcessor(gate)
    processor = AsyncProcessorTraining(recorder, max_chunk=1)  # type: ignore[arg-type]
    processor.process_train(item(0))  # the first chunk starts the worker
    processor.flush()
    gate.clear()
    for _ in range(100):  # the worker is waiting for work: wait until it is
        if processor._idle:
            break
        threading.Event().wait(0.01)
    processor.process_train(item(1))  # max_chunk 1: handed over at once
    assert processor._queue.qsize() == 0
    gate.set()
    processor.close()
    assert len(recorder.chunks) == 2


def test_worker_error_is_kept_reported_and_later_events_dropped() -> None:
    """The first exception on the worker is kept and reported; the worker keeps draining."""

    class Failing(RecordingProcessor):
        def process_chunk(self, chunk: Sequence[tuple[Split, Any]]) -> None:
            super().process_chunk(chunk)
            raise RuntimeError("metric broke")

    recorder = Failing()
    reported: list[BaseException] = []
    processor = AsyncProcessorTraining(recorder, max_chunk=1, on_error=reported.append)  # type: ignore[arg-type]
    processor.process_train(item(1))
    processor.process_train(item(2))
    processor.flush()
    processor.close()
    assert isinstance(processor.error, RuntimeError) and reported == [processor.error]
    assert len(recorder.chunks) == 1


@given(st.integers(1, 40), st.integers(1, 8), st.integers(0, 40))
def test_inline_chunks_are_processed_in_order_on_the_callers_thread(
    count: int, max_chunk: int, switch: int
) -> None:
    """Inline, chunks are processed at their boundaries on the caller's thread, in order and
    bounded as on the worker, and no thread is started; switching to inline midway first
    processes what the worker was given, so the order holds across the change."""
    recorder = RecordingProcessor()
    processor = AsyncProcessorTraining(recorder, max_chunk=max_chunk, clock=ManualClock())  # type: ignore[arg-type]
    events = [item(i) for i in range(1, count + 1)]
    for index, event in enumerate(events):
        if index == switch:
            processor.inline = True
        processor.process_train(event)
    processor.inline = True
    before = len([e for chunk in recorder.chunks for e in chunk])
    processor.flush()
    assert [e for chunk in recorder.chunks for e in chunk] == events
    assert all(len(chunk) <= max_chunk for chunk in recorder.chunks)
    expected = {"train-worker"} if switch > 0 else set()
    assert recorder.threads - {threading.current_thread().name} == expected
    if switch == 0:  # inline from the start: full chunks were processed as they filled
        assert before == count - count % max_chunk
        assert processor._thread is None
    processor.close()
    assert not any(t.name == "train-worker" for t in threading.enumerate())


def test_inline_error_is_kept_reported_and_later_events_dropped() -> None:
    """Inline, a processing error is kept and reported as on the worker, never raised to the
    training thread; an abort (KeyboardInterrupt) goes through."""

    class Failing(RecordingProcessor):
        def __init__(self, error: BaseException) -> None:
            super().__init__()
            self.error = error

        def process_chunk(self, chunk: Sequence[tuple[Split, Any]]) -> None:
            super().process_chunk(chunk)
            raise self.error

    recorder = Failing(RuntimeError("metric broke"))
    reported: list[BaseException] = []
    processor = AsyncProcessorTraining(
        recorder,  # type: ignore[arg-type]
        max_chunk=1,
        on_error=reported.append,
        inline=True,
    )
    processor.process_train(item(1))
    processor.process_train(item(2))
    processor.close()
    assert isinstance(processor.error, RuntimeError) and reported == [processor.error]
    assert len(recorder.chunks) == 1
    aborting = AsyncProcessorTraining(Failing(KeyboardInterrupt()), max_chunk=1, inline=True)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        aborting.process_train(item(1))
    assert aborting.error is None


def test_inline_processing_runs_outside_inference_mode_and_without_a_graph() -> None:
    """A chunk processed inline during validation (under inference mode) or training (grad
    on) sees what the worker sees: no inference mode, no autograd graph."""
    modes: list[tuple[bool, bool]] = []

    class Modes(RecordingProcessor):
        def process_chunk(self, chunk: Sequence[tuple[Split, Any]]) -> None:
            modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))

    processor = AsyncProcessorTraining(Modes(), max_chunk=1, inline=True)  # type: ignore[arg-type]
    processor.process_train(item(1))
    with torch.inference_mode():
        processor.process_valid(item(2))
    processor.close()
    assert modes == [(False, False), (False, False)]


def full_processor() -> tuple[FullEventProcessorTraining, InMemoryMetricLogger]:
    metrics = MetricsTraining()
    metrics.register(Split.TRAIN, LossMetric())
    logger = InMemoryMetricLogger()
    processor = FullEventProcessorTraining(
        metrics, CliMetricsRenderer(io.StringIO()), EventStore([logger])
    )
    return processor, logger


@pytest.mark.parametrize(
    "loss",
    [
        torch.tensor(0.25),
        torch.tensor([0.25]),
        torch.tensor([[0.25]]),
        torch.tensor(1, dtype=torch.int64),
    ],
    ids=["scalar", "vector", "matrix", "int"],
)
def test_one_element_losses_of_any_shape_are_logged_as_floats(loss: torch.Tensor) -> None:
    """Every one-element loss reaches the log as its value, with weight 1."""
    processor, logger = full_processor()
    processor.process_chunk(
        [(Split.TRAIN, StartSplit(1, 2)), (Split.TRAIN, item(1, loss)), (Split.TRAIN, item(2))]
    )
    assert logger.values[("Loss", Split.TRAIN, 1)] == [f"{loss.item():g},1", "2,1"]


def epoch_events(epoch: int, items: int) -> list[tuple[Split, Any]]:
    events: list[tuple[Split, Any]] = [(Split.TRAIN, StartSplit(epoch, items))]
    events += [(Split.TRAIN, item(i)) for i in range(1, items + 1)]
    return [*events, (Split.TRAIN, EndSplit(epoch))]


def test_application_log_has_one_line_per_chunk_for_epochs_and_iterations(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Epochs started and iterations processed are summed up per chunk, not written per event."""
    processor, _ = full_processor()
    with caplog.at_level(logging.INFO, logger="ember.train"):
        processor.process_chunk(epoch_events(1, 3) + epoch_events(2, 3))
        processor.log_progress()
        processor.process_chunk(epoch_events(3, 2))
        processor.log_progress()
        processor.log_progress()  # nothing new: nothing written
    assert [record.getMessage() for record in caplog.records] == [
        "Executing training steps for epochs 1-2",
        "Iterations from epoch 1 iteration 1 to epoch 2 iteration 3 (train)",
        "Executing training step for epoch 3",
        "Iterations 1-2 of epoch 3 (train)",
    ]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_losses_on_a_device_are_read_together_and_logged() -> None:
    """Device losses of mixed shapes are stacked and read in one go, values unchanged."""
    processor, logger = full_processor()
    losses = [torch.tensor(0.5), torch.tensor([1.5]), torch.tensor(2.5)]
    processor.process_chunk(
        [(Split.TRAIN, StartSplit(1, 3))]
        + [(Split.TRAIN, item(i, loss.cuda())) for i, loss in enumerate(losses, start=1)]
    )
    assert logger.values[("Loss", Split.TRAIN, 1)] == ["0.5,1", "1.5,1", "2.5,1"]


def test_per_sample_training_losses_log_their_mean_weighted_by_samples() -> None:
    """A per-sample loss logs its mean with its sample count as weight; a NaN in it stops."""
    processor, logger = full_processor()
    processor.process_chunk(
        [(Split.TRAIN, StartSplit(1, 2)), (Split.TRAIN, item(1, torch.tensor([1.0, 2.0, 6.0])))]
    )
    assert logger.values[("Loss", Split.TRAIN, 1)] == ["3,3"]
    with pytest.raises(NonFiniteLossError, match="iteration 2"):
        processor.process_chunk([(Split.TRAIN, item(2, torch.tensor([1.0, float("nan")])))])


class CountingLogger(InMemoryMetricLogger):
    """Counts the calls of ``log`` and the values each brought."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []

    def log(self, values: Sequence[Any]) -> None:
        self.calls.append(len(values))
        super().log(values)


def test_consecutive_items_of_a_split_reach_each_logger_in_one_call_in_order() -> None:
    """A chunk's run of items of one split is logged in one call per logger, in order; split
    events between runs keep their place (the valid run is logged after the train epoch
    value)."""
    metrics = MetricsTraining()
    metrics.register(Split.TRAIN, LossMetric())
    metrics.register(Split.VALID, LossMetric())
    logger = CountingLogger()
    processor = FullEventProcessorTraining(
        metrics, CliMetricsRenderer(io.StringIO()), EventStore([logger])
    )
    processor.process_chunk(
        [*epoch_events(1, 4), (Split.VALID, StartSplit(1, 2))]
        + [(Split.VALID, item(i)) for i in (5, 6)]
        + [(Split.VALID, EndSplit(1))]
    )
    assert logger.calls == [4, 1, 2, 1]  # train items, train epoch value, valid items, value
    assert logger.values[("Loss", Split.TRAIN, 1)] == ["1,1", "2,1", "3,1", "4,1", "2.5,final"]
    assert logger.values[("Loss", Split.VALID, 1)] == ["5,1", "6,1", "5.5,final"]
    assert [value.step for value in logger.numbers[:4]] == [0, 0, 0, 0]


def test_the_items_before_a_non_finite_loss_are_logged() -> None:
    """A run of items is logged together, yet the batches before a non-finite loss keep their
    lines: the error stops training, never loses what was logged."""
    processor, logger = full_processor()
    events: list[tuple[Split, Any]] = [(Split.TRAIN, StartSplit(1, 4))]
    events += [(Split.TRAIN, item(1)), (Split.TRAIN, item(2))]
    events += [(Split.TRAIN, item(3, torch.tensor(float("nan")))), (Split.TRAIN, item(4))]
    with pytest.raises(NonFiniteLossError, match="iteration 3"):
        processor.process_chunk(events)
    assert logger.values[("Loss", Split.TRAIN, 1)] == ["1,1", "2,1"]
