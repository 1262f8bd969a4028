"""Chunks of events, processed on ``train-worker`` or inline (Burn's ``AsyncProcessorTraining``).

:class:`AsyncProcessorTraining` gathers the events into *chunks* (up to 256 events, or 50 ms of
them) and runs a :class:`~ember.train._processor.full.FullEventProcessorTraining` on them on one
thread named ``train-worker``, fed through a queue of capacity 1 as in Burn: handing each event
over alone costs 25-30 % of a small model's step in GIL switches (``docs/design.md``, "The
metrics thread"), a chunk a few percent. When the run is on the CPU there is no device to wait
for, and the hand-over to a thread is cheap only when a core is free for it (on a busy machine
it costs 3-5 times more): ``inline`` processes each chunk on the caller's thread at the chunk
boundary instead, the same Python without GIL hand-offs. Order and backpressure are kept either
way; :meth:`AsyncProcessorTraining.flush` processes what is pending.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ember.train._events import EvaluatorEvent, LearnerEvent
from ember.train._processor.base import Event
from ember.train._processor.full import FullEventProcessorTraining
from ember.train._renderer.base import MetricsRenderer
from ember.train._vocabulary import Split

__all__ = ["AsyncProcessorTraining"]

log = logging.getLogger("ember.train")

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

    An exception while processing is kept in ``error`` (the first one only), reported
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
