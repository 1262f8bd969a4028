"""Event processing: metrics, logs and rendering, in chunks of events.

:class:`FullEventProcessorTraining` turns events into metric values, log lines and renderer
calls. :class:`AsyncProcessorTraining` gathers the events into *chunks* (up to 256 events, or
50 ms of them) and runs it on one thread named ``train-worker``, fed through a queue of capacity
1 as in Burn: handing each event over alone costs 25-30 % of a small model's step in GIL
switches (``docs/design.md``, "The metrics thread"), a chunk a few percent. When the run is on
the CPU there is no device to wait for, and the hand-over to a thread is cheap only when a core
is free for it (on a busy machine it costs 3-5 times more): ``inline`` processes each chunk on
the caller's thread at the chunk boundary instead, the same Python without GIL hand-offs. Order
and backpressure are kept either way; :meth:`AsyncProcessorTraining.flush` processes what is
pending.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ember._errors import NonFiniteLossError
from ember.train._events import (
    End,
    EndEpoch,
    EndSplit,
    EvaluatorEvent,
    LearnerEvent,
    ProcessedItem,
    Start,
    StartSplit,
)
from ember.train._metric.base import (
    MetricMetadata,
    adapt,
)
from ember.train._metric.loss import LossInput
from ember.train._metric.registered import MetricsTraining
from ember.train._metric.store import EventStore
from ember.train._outputs import ItemLazy
from ember.train._renderer.base import MetricsRenderer, MetricState
from ember.train._renderer.progress import announce_split, announce_start, items_progress
from ember.train._vocabulary import Split

__all__ = [
    "AsyncProcessorTraining",
    "EventProcessor",
    "FullEventProcessorTraining",
    "SilentProcessor",
]

log = logging.getLogger("ember.train")

Event = LearnerEvent | EvaluatorEvent
"""What the processors carry: a training run's events or an evaluation's."""


class EventProcessor(Protocol):
    """Receives the training loop's events."""

    def process_train(self, event: LearnerEvent) -> None:
        """An event of the training split (and the run-level events)."""
        ...

    def process_valid(self, event: LearnerEvent) -> None:
        """An event of the validation split."""
        ...

    def flush(self) -> None:
        """Return once every event given so far has been processed."""
        ...

    @property
    def error(self) -> BaseException | None:
        """The first error met while processing events (it ends the run), or None."""
        ...


class SilentProcessor:
    """Drops every event: the processor of a process that neither logs nor renders (DDP ranks
    other than 0, whose outputs rank 0 logs)."""

    error: BaseException | None = None

    def process_train(self, event: LearnerEvent) -> None:
        """Dropped."""

    def process_valid(self, event: LearnerEvent) -> None:
        """Dropped."""

    def flush(self) -> None:
        """Nothing is pending."""


_LAZY: dict[type[Any], bool] = {}  # per output type: is it an ItemLazy (checked once)


def _synced(item: Any) -> Any:
    """The item after its ``sync()`` (an :class:`ItemLazy`), or itself."""
    kind = type(item)
    lazy = _LAZY.get(kind)
    if lazy is None:
        lazy = _LAZY[kind] = isinstance(item, ItemLazy)
    return item.sync() if lazy else item


def _host_values(tensors: Sequence[torch.Tensor]) -> list[float]:
    """The values of one-element tensors, read with as few GIL releases as possible.

    ``tolist()`` of a CPU tensor never gives up the GIL, while every other torch call does,
    and a metrics thread that gives up the GIL must wait for the training thread to give it
    back, which a small model's training thread does only between two of its many tiny ops
    (in the measured case ``.item()`` took 30 µs instead of 0.1). Tensors elsewhere are
    stacked and read in one go: a single device synchronisation for the chunk.
    """
    if all(t.is_cpu for t in tensors):
        return [_number(t.tolist()) for t in tensors]
    if any(t.dim() != tensors[0].dim() for t in tensors):
        tensors = [t.reshape(()) for t in tensors]
    return [_number(v) for v in torch.stack(list(tensors)).flatten().tolist()]


def _number(value: Any) -> float:
    """The single number in a nested list (``tolist()`` of a one-element tensor)."""
    while isinstance(value, list):
        (value,) = value
    return value if type(value) is float else float(value)


class FullEventProcessorTraining:
    """Computes metrics, logs them through the event store and drives the renderer."""

    def __init__(self, metrics: MetricsTraining, renderer: MetricsRenderer, store: EventStore):
        self.metrics = metrics
        self.renderer = renderer
        self.store = store
        self._epoch = 0
        # per split: (epoch, iteration) of the first and of the last item since the last line
        self._iterations: dict[Split, tuple[int, int, int, int]] = {}
        # per split: the first and the last epoch started since the last line
        self._started: dict[Split, tuple[int, int]] = {}
        self._without_loss: set[type[Any]] = set()
        self._step = 0  # the run's optimizer steps at the last item: the loggers' global step
        self._show_progress = items_progress(renderer)  # in steps too once Start says so

    def process_train(self, event: LearnerEvent) -> None:
        """Handle an event of the training split."""
        self.process_chunk([(Split.TRAIN, event)])

    def process_valid(self, event: LearnerEvent) -> None:
        """Handle an event of the validation split."""
        self.process_chunk([(Split.VALID, event)])

    def process_chunk(self, chunk: Sequence[tuple[Split, Event]]) -> None:
        """Handle events in order (``docs/design.md``, "The metrics thread"), the chunk's losses
        read back together first (see ``_host_values``)."""
        items = [
            _synced(event.item.item) if type(event) is ProcessedItem else None for _, event in chunk
        ]
        losses = self._read_losses(items)
        for (split, event), item, loss in zip(chunk, items, losses, strict=True):
            if type(event) is ProcessedItem:
                self._process_item(split, event.item, item, loss)
            else:
                self._process_event(split, event)

    def _process_item(
        self, split: Split, training_item: Any, item: Any, loss: LossInput | None
    ) -> None:
        iteration = training_item.iteration
        self._step = training_item.step
        span = self._iterations.get(split)
        first = (self._epoch, iteration) if span is None else span[:2]
        self._iterations[split] = (*first, self._epoch, iteration)
        if split is Split.TRAIN and loss is not None:
            value = loss.host_value()
            if loss.value is None:  # a per-sample loss: its mean, once for the check and the metric
                loss = LossInput(loss.tensor, value)
            if not math.isfinite(value):
                raise NonFiniteLossError(
                    f"the training loss is not finite at epoch {self._epoch}, iteration "
                    f"{iteration} ({value}); training stopped and no checkpoint was "
                    "written from these weights"
                )
        metadata = MetricMetadata(
            training_item.progress, iteration, training_item.lr, training_item.grad_norm
        )
        self._publish(split, self.metrics.update(split, item, metadata, loss))
        self._show_progress(split, training_item)

    def _process_event(self, split: Split, event: Event) -> None:
        renderer = self.renderer
        if isinstance(event, StartSplit):
            self._epoch = event.epoch
            started = self._started.get(split)
            self._started[split] = (event.epoch if started is None else started[0], event.epoch)
            self.store.start_split(split, event.epoch)
            announce_split(renderer, split, event)
        elif isinstance(event, EndSplit):
            self._publish(split, self.metrics.end_epoch(split))
            self.store.end_split(split)
            renderer.end_split()
        elif isinstance(event, EndEpoch):
            renderer.update_epoch(event.epoch)
        elif isinstance(event, Start):
            self._show_progress = announce_start(renderer, event, self.metrics)
        elif isinstance(event, End):
            renderer.end()
            renderer.on_train_end(event.summary)

    def _read_losses(self, items: Sequence[Any]) -> list[LossInput | None]:
        """The loss of every item that has one, one-element ones read to the host together
        ("finite only" checks them)."""
        tensors: list[torch.Tensor | None] = []
        for item in items:
            tensor = None
            if item is not None and type(item) not in self._without_loss:
                try:
                    tensor = adapt(item, LossInput).tensor
                except TypeError:
                    self._without_loss.add(type(item))  # an output without a loss
            tensors.append(tensor)
        scalars = [t for t in tensors if t is not None and t.numel() == 1]
        values = iter(_host_values(scalars) if scalars else [])
        return [
            None if t is None else LossInput(t, next(values) if t.numel() == 1 else None)
            for t in tensors
        ]

    def log_progress(self) -> None:
        """Write the epochs started and the iterations processed since the last call to the
        application log: per split, one line for the epochs and one for the iterations.

        Called once per chunk of events (at most ~20 times a second), not once per epoch and
        iteration as Burn does: a fast model would otherwise write megabytes of lines a
        minute, and a log record costs a small model's step a few percent.
        """
        for split in (Split.TRAIN, Split.VALID):
            started = self._started.pop(split, None)
            if started is not None:
                name = "training" if split is Split.TRAIN else "validation"
                if started[0] == started[1]:
                    log.info("Executing %s step for epoch %d", name, started[0])
                else:
                    log.info("Executing %s steps for epochs %d-%d", name, *started)
            span = self._iterations.pop(split, None)
            if span is None:
                continue
            first_epoch, first, epoch, last = span
            if first_epoch == epoch:
                log.info("Iterations %d-%d of epoch %d (%s)", first, last, epoch, split.value)
            else:
                log.info(
                    "Iterations from epoch %d iteration %d to epoch %d iteration %d (%s)",
                    *(first_epoch, first, epoch, last, split.value),
                )

    def _publish(self, split: Split, states: Sequence[MetricState]) -> None:
        if not states:
            return
        self.store.log(split, states, self._step)
        update = self.renderer.update_train if split is Split.TRAIN else self.renderer.update_valid
        for state in states:
            update(state)


_STOP = object()


@dataclass(frozen=True, slots=True)
class _Chunk:
    """Events for the worker; ``taken`` is set once the worker holds them (and the GIL)."""

    events: list[tuple[Split, Event]]
    taken: threading.Event | None


class AsyncProcessorTraining:
    """Runs a :class:`FullEventProcessorTraining` on the ``train-worker`` thread (``name``: an
    evaluation's runs on ``eval-worker``), or, with :attr:`inline`, on the caller's thread.

    A full chunk (``max_chunk`` events in less than ``max_delay``: steps of a fraction of a
    millisecond) is handed to an idle worker with the GIL: the training thread waits until the
    worker has taken it. Otherwise the worker, woken up, would wait for the GIL while the
    training thread drops and retakes it around each of its many tiny torch ops, waking the
    worker every time for nothing; measured on the seed model, that convoy cost more than
    processing the events. Slower steps leave the worker time to take the GIL while a long op
    runs, so their chunks are handed over without waiting, as is any chunk for a busy worker.
    The thread is started with the first chunk it is handed, so an inline processor never has
    one.

    An exception while processing is kept in :attr:`error` (the first one only), reported
    through ``on_error`` (the builder stops training there), and every later event is dropped,
    so the training thread never blocks on a dead worker; inline, the training thread goes on
    the same way (only an abort, ``KeyboardInterrupt`` or ``SystemExit``, goes through).
    """

    def __init__(
        self,
        processor: FullEventProcessorTraining,
        *,
        on_error: Callable[[BaseException], None] | None = None,
        max_chunk: int = 256,
        max_delay: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        name: str = "train-worker",
        inline: bool = False,
    ) -> None:
        self.processor = processor
        self.error: BaseException | None = None
        self._on_error = on_error
        self._max_chunk = max_chunk
        self._max_delay = max_delay
        self._clock = clock
        self._name = name
        self._inline = inline
        self._pending: list[tuple[Split, Event]] = []
        self._last_handoff = clock()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=1)
        self._closed = False
        self._idle = False
        self._thread: threading.Thread | None = None

    @property
    def inline(self) -> bool:
        """Whether chunks are processed on the caller's thread (no ``train-worker``).

        For a run on the CPU, where no device read-back can make the caller wait (the launch
        sets it once the strategy has placed the model). Setting it first processes every
        event given so far, so the order holds across the change.
        """
        return self._inline

    @inline.setter
    def inline(self, inline: bool) -> None:
        if inline != self._inline:
            self.flush()
            self._inline = inline

    def process_train(self, event: LearnerEvent) -> None:
        """Queue an event of the training split."""
        self._submit(Split.TRAIN, event)

    def process_valid(self, event: LearnerEvent) -> None:
        """Queue an event of the validation split."""
        self._submit(Split.VALID, event)

    def process_test(self, event: EvaluatorEvent) -> None:
        """Queue an event of an evaluation (the test split)."""
        self._submit(Split.TEST, event)

    def _submit(self, split: Split, event: Event) -> None:
        self._pending.append((split, event))
        if (
            len(self._pending) >= self._max_chunk
            or self._clock() - self._last_handoff >= self._max_delay
        ):
            self._hand_off()

    def flush(self) -> None:
        """Wait until every event submitted so far has been processed (a FIFO barrier)."""
        self._hand_off()
        if self._thread is not None:
            done = threading.Event()
            self._put(done)
            self._wait(done)

    def close(self) -> MetricsRenderer:
        """Process what is pending, stop the thread and hand back the renderer (idempotent)."""
        if not self._closed:
            self._closed = True
            self._hand_off()
            if self._thread is not None:
                self._put(_STOP)
                self._thread.join()
        return self.processor.renderer

    def _hand_off(self) -> None:
        self._last_handoff = self._clock()
        if self._pending:
            chunk, self._pending = self._pending, []
            if self._inline:
                # outside inference mode and without a graph, as on the worker: a metric's
                # state made here during validation must stay usable in training
                with torch.inference_mode(False), torch.no_grad():
                    self._process(chunk, Exception)
            elif self._idle and len(chunk) >= self._max_chunk:  # see the class doc
                taken = threading.Event()
                self._put(_Chunk(chunk, taken))
                self._wait(taken)
            else:
                self._put(_Chunk(chunk, None))

    def _process(self, events: list[tuple[Split, Event]], catch: type[BaseException]) -> None:
        """Process a chunk unless an earlier one failed; a failure is kept and reported."""
        if self.error is not None:
            return
        try:
            self.processor.process_chunk(events)
            self.processor.log_progress()
        except catch as error:  # reported to the training side
            self.error = error
            log.error("metrics thread failed", exc_info=error)
            if self._on_error is not None:
                self._on_error(error)

    def _wait(self, event: threading.Event) -> None:
        thread = self._thread
        while not event.wait(0.1):
            if thread is None or not thread.is_alive():
                return

    def _put(self, message: object) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()
        while self._thread.is_alive():
            try:
                self._queue.put(message, timeout=0.1)
                return
            except queue.Full:
                continue

    def _run(self) -> None:
        torch.set_grad_enabled(False)  # this thread only reads outputs: never record a graph
        while True:
            self._idle = True
            message = self._queue.get()
            self._idle = False
            if message is _STOP:
                return
            if isinstance(message, threading.Event):
                message.set()
                continue
            assert isinstance(message, _Chunk)
            if message.taken is not None:
                message.taken.set()
            self._process(message.events, BaseException)
