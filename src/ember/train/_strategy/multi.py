"""Training on several devices of one process (Burn's multi-device strategy).

``MultiDevice(["cuda:0", "cuda:1"])`` trains one replica of the model per device, each on its own
worker thread, and takes one optimizer step on the main device (the first one) per round::

    model on devices[0]; replicas = [model, deepcopy(model) on devices[1], ...]
    train loader → n contiguous slices, slice i on devices[i]   (see split_loader)
    threads train-device-0 … train-device-{n-1}, one per device, for the whole fit
    a unit of work of the loop (train/_loop.py) is a round, one batch per device:
        thread i: out_i = replica i's train step(next batch of slice i)   (all at once)
        the main model's .grad += out_i's gradients, moved to the main device, in device order
        (grads_accumulation n: also summed over n rounds, as over n batches on one device)
        copy the main model's buffers into the replicas
        after the loop's optimizer step: copy the main model's parameters into the replicas
        one ProcessedItem per device output, in device order
    validation: the main device's model

Gradients are **summed** across devices, never averaged (as in Burn): with mean-reduced losses
a round is like one batch n times larger trained with an n times larger learning rate; divide
the lr by the number of devices to keep the single-device step size.

Events: every device's batch gets its own ``ProcessedItem`` (so every batch has its log line),
in device order, after the round's optimizer step. ``iteration`` counts device batches within
the epoch (a round of n devices advances it by n); ``progress`` is the whole split's: the items
consumed so far by all slices out of the training loader's ``num_items()``, the same in every
event of a round, complete in the last round's. When the slices have different numbers of
batches, the last rounds hold only the devices that still have one.

Replicas start every round equal to the main model (its buffers are copied every round, so
running statistics such as BatchNorm's follow the main device's batches). Devices that share a
random generator (several ``"cpu"`` entries, or one CUDA device listed twice) draw from it in
thread-scheduling order: random operations (dropout) are then not reproducible from run to run,
and must not be inside gradient-checkpointed modules there (a recomputation could replay
another thread's draws). Distinct CUDA devices each have their own generator.

An exception in a replica's ``train_step`` is re-raised on the training thread once every
device has finished the round: the original exception with its traceback and a note naming the
device. Checkpoints save each slice's position as ``train-device-{i}``: a run resumes with the
same number of devices.

A device list of one device is :class:`~ember.train._strategy.single.SingleDevice` on it, exactly
(the loader is not sliced, no thread is started).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from ember._closing import ClosesOnExit
from ember._device import available_device
from ember.data import DataLoader, DataLoaderError, DataLoaderIterator, DeviceLike, Progress
from ember.train._first_batch import check_train_output
from ember.train._learner import Learner
from ember.train._precision import Precision
from ember.train._step import (
    StepContext,
    TrainOutput,
    current_step,
    step_context,
    trained_parameters,
)
from ember.train._strategy.base import LocalRun, StrategyRun, add_gradients
from ember.train._strategy.single import SingleDevice

__all__ = ["MultiDevice", "split_loader"]

log = logging.getLogger("ember.train")


def split_loader(loader: DataLoader[Any], devices: Sequence[torch.device]) -> list[DataLoader[Any]]:
    """``loader`` cut into one contiguous item range per device (Burn's ``split_dataloader``).

    With ``n`` devices and ``N`` items, device ``i`` gets items ``[i*(N//n), (i+1)*(N//n))`` of
    the unshuffled data and the last device also the ``N % n`` remaining ones. Each slice keeps
    its range for the whole run and shuffles within it, with its own stream derived from the
    loader's (``DataLoader.slice``); it builds its batches on its device.
    """
    total, count = loader.num_items(), len(devices)
    if total is None:
        raise DataLoaderError(
            f"MultiDevice slices the training loader by item range, and a "
            f"{type(loader).__name__} has no length: train a streaming source on one device or "
            "with DistributedDataParallel"
        )
    if total < count:
        raise ValueError(
            f"the training loader has {total} items, fewer than the {count} devices: every "
            "device needs at least one"
        )
    step = total // count
    bounds = [(i * step, (i + 1) * step if i < count - 1 else total) for i in range(count)]
    return [
        loader.slice(start, end).to_device(device)
        for (start, end), device in zip(bounds, devices, strict=True)
    ]


class MultiDevice:
    """Data-parallel training on ``devices`` (threads, one per device); ``devices[0]`` is main.

    The model's replicas are made with ``copy.deepcopy`` of the model once it is on the main
    device; the learner's optimizer only ever sees the main model's parameters. See the module
    docstring for the round, the summed gradients and what the events mean.
    """

    is_main = True

    def __init__(self, devices: Sequence[DeviceLike]) -> None:
        if isinstance(devices, str | torch.device) or not isinstance(devices, Sequence):
            raise TypeError(
                f"devices must be a sequence of devices, e.g. ['cuda:0', 'cuda:1'], got {devices!r}"
            )
        if not devices:
            raise ValueError("devices must name at least one device, got an empty sequence")
        self.devices = tuple(
            available_device(device, f"devices[{i}]") for i, device in enumerate(devices)
        )

    @property
    def main_device(self) -> torch.device:
        """Where the learner's model, the optimizer step and validation run."""
        return self.devices[0]

    def __repr__(self) -> str:
        return f"MultiDevice({[str(device) for device in self.devices]})"

    def start(self, model: nn.Module, loaders: Mapping[str, DataLoader[Any]]) -> StrategyRun:
        """The main model on ``devices[0]``, a replica and a slice of ``train`` per device; the
        other loaders on the main device."""
        if len(self.devices) == 1:
            return SingleDevice(self.devices[0]).start(model, loaders)
        devices = [_indexed(device) for device in self.devices]
        log.info("Training on %d devices: %s", len(devices), ", ".join(map(str, devices)))
        model.to(devices[0])
        return MultiDeviceRun(model, devices, loaders)

    def check(self, learner: Learner[Any]) -> None:
        """Any learner: the optimizer steps the main model only."""

    def use_precision(self, precision: Precision) -> None:
        """Autocast is entered on every device's thread from the step context."""


def _indexed(device: torch.device) -> torch.device:
    """``device`` with its index: a bare ``cuda`` is the current CUDA device (looked up now)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _replicate(model: nn.Module, devices: Sequence[torch.device]) -> list[nn.Module]:
    replicas = []
    for device in devices:
        replica = copy.deepcopy(model).to(device)
        trained_parameters(replica, refresh=True)  # read here, not concurrently on the threads
        replicas.append(replica)
    return replicas


_Round = list[tuple[int, Any]]  # (device index, its batch) for the devices that have one


class MultiDeviceRun(LocalRun):
    """The run of :class:`MultiDevice`: each unit of work is a round of one batch per device."""

    def __init__(
        self,
        model: nn.Module,
        devices: Sequence[torch.device],
        loaders: Mapping[str, DataLoader[Any]],
    ) -> None:
        main = devices[0]
        self._main = model
        # "train" is only read for its size (StartSplit) and saved in checkpoints: the slices,
        # saved as train-device-{i}, are what is iterated.
        placed = {name: loader.to_device(main) for name, loader in loaders.items()}
        self._slices = split_loader(loaders["train"], devices) if "train" in loaders else []
        placed.update({f"train-device-{i}": part for i, part in enumerate(self._slices)})
        self.loaders = placed
        self.replicas = (model, *_replicate(model, devices[1:]))
        self._threads = _DeviceThreads(devices)
        self._steps: list[Callable[[Any], Any]] | None = None  # the replicas' train steps
        self._checked = False  # the first round's outputs are checked (_first_batch.py)
        # The replicas' tensors, paired with the main model's, for re-synchronising them.
        main_params = [param for _, param in trained_parameters(model)]
        main_buffers = list(model.buffers())
        self._params = [
            list(zip(main_params, (p for _, p in trained_parameters(r)), strict=True))
            for r in self.replicas[1:]
        ]
        self._buffers = [
            list(zip(main_buffers, r.buffers(), strict=True)) for r in self.replicas[1:]
        ]

    def train_pass(self) -> Iterator[tuple[_Round, Progress]]:
        """Rounds until every slice is exhausted; the progress is the whole split's.

        The replicas start the pass equal to the main model (restored from a checkpoint, say).
        """
        self._synchronise(self._params)
        self._synchronise(self._buffers)
        iterators: list[DataLoaderIterator[Any] | None] = [iter(part) for part in self._slices]
        consumed = [0] * len(iterators)
        total = sum(part.num_items() or 0 for part in self._slices)  # slices have lengths
        while True:
            batches: _Round = []
            for i, iterator in enumerate(iterators):
                if iterator is None:
                    continue
                batch = next(iterator, _END)
                if batch is _END:
                    iterators[i] = None
                    continue
                consumed[i] = iterator.progress().items_processed
                batches.append((i, batch))
            if not batches:
                return
            yield batches, Progress(sum(consumed), total)

    def train_step(self, learner: Learner[Any], batch: _Round) -> Sequence[TrainOutput[Any]]:
        """Every device's ``train_step`` at once; their gradients summed into the main model's.

        The main model's backward adds to its ``.grad`` slots inside an accumulation window;
        every other replica starts from zero each round and its gradients are added to the
        main model's, in device order.
        """
        context = current_step()
        if self._steps is None:  # each replica's train step: its own, or the Learner's
            self._steps = [learner.train_step_of(replica) for replica in self.replicas]
        for i, device_batch in batch:
            self._threads.submit(i, device_batch, context, self._steps[i])
        outputs = self._threads.collect([i for i, _ in batch])
        if not self._checked:
            for output in outputs:
                check_train_output(output, self._main)
            self._checked = True
        for output in outputs:
            add_gradients(self._main, output.grads)
        self._synchronise(self._buffers)
        return outputs

    def after_optimizer_step(self) -> None:
        """Copy the main model's new parameters into the replicas."""
        self._synchronise(self._params)

    def close(self, error: BaseException | None = None) -> None:
        """Stop the device threads, then close the loaders made for the run."""
        self._threads.close()
        super().close(error)

    @staticmethod
    @torch.no_grad()
    def _synchronise(
        pairs_per_replica: Sequence[Sequence[tuple[torch.Tensor, torch.Tensor]]],
    ) -> None:
        """Copy each main tensor into its replica's.

        Buffers every round, so that every round starts from replicas equal to the main model:
        running statistics (BatchNorm) therefore follow the main device's batches only.
        """
        for pairs in pairs_per_replica:
            for source, target in pairs:
                target.copy_(source)


_END = object()  # what next() returns for an exhausted slice

_Result = tuple[Any, BaseException | None]  # (train_step's output, None) or (None, its error)
# a batch, the step context to run it in and the replica's train step
_Task = tuple[Any, StepContext | None, Callable[[Any], Any]]


class _DeviceThreads(ClosesOnExit):
    """One thread per device, named ``train-device-{i}``, running replica ``i``'s train step.

    Each thread takes batches from its own queue and puts ``(output, error)`` on its own result
    queue; :meth:`collect` waits for every device it sent a batch to before raising, so no
    thread is ever left mid-step, and :meth:`close` stops and joins them all.
    """

    def __init__(self, devices: Sequence[torch.device]) -> None:
        self.devices = devices
        self._inputs: list[queue.SimpleQueue[_Task | None]] = []
        self._results: list[queue.SimpleQueue[_Result]] = []
        self._threads: list[threading.Thread] = []
        for i, device in enumerate(devices):
            inputs: queue.SimpleQueue[_Task | None] = queue.SimpleQueue()
            results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
            thread = threading.Thread(
                target=_work,
                args=(device, inputs, results),
                name=f"train-device-{i}",
                daemon=True,
            )
            self._inputs.append(inputs)
            self._results.append(results)
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()

    def submit(
        self, device: int, batch: Any, context: StepContext | None, step: Callable[[Any], Any]
    ) -> None:
        """Hand ``batch`` to device ``device``'s thread, to run ``step`` (its replica's train
        step) in the step ``context`` (the main device's; the others always start from zero
        gradients)."""
        if device > 0 and context is not None and context.accumulating:
            context = dataclasses.replace(context, accumulating=False)
        self._inputs[device].put((batch, context, step))

    def collect(self, devices: Sequence[int]) -> list[TrainOutput[Any]]:
        """The outputs of ``devices``, in that order; re-raises the first device's error.

        The error is the one raised on the device's thread (its traceback included), with a
        note naming the device; other devices that failed in the same round are noted on it.
        """
        results = [self._results[i].get() for i in devices]
        failed = [
            (i, error) for i, (_, error) in zip(devices, results, strict=True) if error is not None
        ]
        if failed:
            (first, error), *others = failed
            error.add_note(
                f"raised on device {first} ({self.devices[first]}), train-device-{first}"
            )
            for i, other in others:
                error.add_note(f"device {i} ({self.devices[i]}) also failed: {other!r}")
            raise error
        return [output for output, _ in results]

    def close(self) -> None:
        """Stop the threads once their current step is done, and join them. Idempotent."""
        for inputs, thread in zip(self._inputs, self._threads, strict=True):
            if thread.is_alive():
                inputs.put(None)
        for thread in self._threads:
            thread.join()


def _work(
    device: torch.device,
    inputs: queue.SimpleQueue[_Task | None],
    results: queue.SimpleQueue[_Result],
) -> None:
    """A device thread: the train step on every batch handed to it, until the ``None`` stop."""
    # A new thread would otherwise use all cores for OpenMP, ignoring torch.set_num_threads.
    torch.get_num_threads()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # per thread: tensors made with device="cuda" land here
    while (task := inputs.get()) is not None:
        batch, context, step = task
        try:
            if context is None:
                results.put((step(batch), None))
            elif context.autocast is None:
                with step_context(context):
                    results.put((step(batch), None))
            else:  # autocast is per thread: enter it here too, as the loop does
                with step_context(context), torch.autocast(*context.autocast):
                    results.put((step(batch), None))
        except BaseException as error:  # anything: collect() re-raises it on the training side
            results.put((None, error))
