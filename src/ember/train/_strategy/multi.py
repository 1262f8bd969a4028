"""Training on several devices of one process (Burn's multi-device strategy, reference §2.2).

``MultiDevice(["cuda:0", "cuda:1"])`` trains one replica of the model per device, each on its own
worker thread, and takes one optimizer step on the main device (the first one) per round::

    learner.fork(devices[0]); replicas = [model, deepcopy(model) on devices[1], ...]
    train loader → n contiguous slices, slice i on devices[i]   (see split_loader)
    threads train-device-0 … train-device-{n-1}, one per device, for the whole fit
    per epoch (run_epochs):
        train split, one round at a time until every slice is exhausted:
            thread i: out_i = replica_i.train_step(next batch of slice i)   (all at once)
            grads = sum over devices of out_i.grads, moved to the main device
            (grads_accumulation n: also summed over n rounds, as over n batches on one device)
            lr_step; optimizer_step(grads); copy the main model's parameters into the replicas
            copy the main model's buffers into the replicas
            one ProcessedItem per device output, in device order
        valid split: valid_epoch on the main device's model

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
import logging
import queue
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, cast

import torch
from torch import nn

from ember.data import DataLoader, DataLoaderIterator, DeviceLike, Progress
from ember.data._device import as_device
from ember.train._epoch import valid_epoch
from ember.train._events import ProcessedItem, TrainingItem
from ember.train._gradient_checkpointing import checkpointed
from ember.train._learner import Learner
from ember.train._step import (
    GradientsAccumulator,
    GradientsParams,
    TrainOutput,
    TrainStep,
    trained_parameters,
)
from ember.train._strategy.base import FitResult, TrainingComponents, resume, run_epochs
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

    def __init__(self, devices: Sequence[DeviceLike]) -> None:
        if isinstance(devices, str | torch.device) or not isinstance(devices, Sequence):
            raise TypeError(
                f"devices must be a sequence of devices, e.g. ['cuda:0', 'cuda:1'], got {devices!r}"
            )
        if not devices:
            raise ValueError("devices must name at least one device, got an empty sequence")
        self.devices = tuple(as_device(device, f"devices[{i}]") for i, device in enumerate(devices))

    @property
    def main_device(self) -> torch.device:
        """Where the learner's model, the optimizer step and validation run."""
        return self.devices[0]

    def __repr__(self) -> str:
        return f"MultiDevice({[str(device) for device in self.devices]})"

    def fit(
        self,
        learner: Learner[Any],
        train: DataLoader[Any],
        valid: DataLoader[Any],
        components: TrainingComponents,
        starting_epoch: int,
    ) -> FitResult:
        """The epoch loop of reference §2.2 (one optimizer on the main device)."""
        if len(self.devices) == 1:
            return SingleDevice(self.devices[0]).fit(
                learner, train, valid, components, starting_epoch
            )
        devices = [_indexed(device) for device in self.devices]
        main = devices[0]
        log.info("Training on %d devices: %s", len(devices), ", ".join(map(str, devices)))
        learner.fork(main)
        slices = split_loader(train, devices)
        valid = valid.to_device(main)
        # "train" is only read for its size (StartSplit) and saved in checkpoints: the slices,
        # saved as train-device-{i}, are what is iterated.
        loaders: dict[str, DataLoader[Any]] = {"train": train.to_device(main), "valid": valid}
        loaders.update({f"train-device-{i}": part for i, part in enumerate(slices)})
        try:
            resume(components, learner, loaders, starting_epoch)
            replicas = [learner.model, *_replicate(learner.model, devices[1:])]
            with (
                checkpointed(components.gradient_checkpointing, *replicas),
                _DeviceThreads(replicas, devices) as threads,
            ):
                rounds = _Rounds(learner, main, replicas, threads, slices, components)

                def valid_split(epoch: int) -> None:
                    valid_epoch(learner.model, valid, components.processor, components.interrupter)

                return run_epochs(
                    components, learner, loaders, starting_epoch, rounds.epoch, valid_split
                )
        finally:
            for copied in loaders.values():  # the loaders made here; their threads stop
                copied.close()


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


class _Rounds:
    """The training split on every device: one round = one batch per device, one step."""

    def __init__(
        self,
        learner: Learner[Any],
        main: torch.device,
        replicas: Sequence[nn.Module],
        threads: _DeviceThreads,
        slices: Sequence[DataLoader[Any]],
        components: TrainingComponents,
    ) -> None:
        self.learner = learner
        self.replicas = replicas
        self.threads = threads
        self.slices = slices
        self.components = components
        self.main = main
        # The replicas' tensors, paired with the main model's, for re-synchronising them.
        main_params = [param for _, param in trained_parameters(learner.model)]
        main_buffers = list(learner.model.buffers())
        self.params: list[list[tuple[torch.Tensor, torch.Tensor]]] = [
            list(zip(main_params, (p for _, p in trained_parameters(r)), strict=True))
            for r in replicas[1:]
        ]
        self.buffers: list[list[tuple[torch.Tensor, torch.Tensor]]] = [
            list(zip(main_buffers, r.buffers(), strict=True)) for r in replicas[1:]
        ]

    def epoch(self, epoch: int) -> None:
        """Train one epoch (the split's events are sent by ``run_epochs``)."""
        learner, components = self.learner, self.components
        processor, interrupter = components.processor, components.interrupter
        window_size = components.grads_accumulation or 1
        for replica in self.replicas:
            replica.train()
        iterators: list[DataLoaderIterator[Any] | None] = [iter(part) for part in self.slices]
        consumed = [0] * len(iterators)
        total = sum(part.num_items() for part in self.slices)
        accumulator = GradientsAccumulator()
        window = iteration = 0
        while True:
            sent = []
            for i, iterator in enumerate(iterators):
                if iterator is None:
                    continue
                batch = next(iterator, _END)
                if batch is _END:
                    iterators[i] = None
                    continue
                consumed[i] = iterator.progress().items_processed
                self.threads.submit(i, batch)  # starts while the next device's batch is built
                sent.append(i)
            if not sent:
                break
            outputs = self.threads.collect(sent)
            progress = Progress(sum(consumed), total)
            for output in outputs:
                accumulator.accumulate(_on_device(output.grads, self.main))
            window += 1
            stepped = window == window_size or progress.is_completed
            if stepped:
                learner.lr_step()
                learner.optimizer_step(accumulator.grads())
                window = 0
            self._synchronise(parameters=stepped)
            for output in outputs:
                iteration += 1
                processor.process_train(
                    ProcessedItem(
                        TrainingItem(output.item, progress, iteration, learner.lr_current)
                    )
                )
            if interrupter.should_stop():
                break

    @torch.no_grad()
    def _synchronise(self, *, parameters: bool) -> None:
        """Copy the main model's buffers (and, after a step, parameters) into the replicas.

        Buffers every round, so that every round starts from replicas equal to the main model:
        running statistics (BatchNorm) therefore follow the main device's batches only.
        """
        for pairs in self.buffers:
            for source, target in pairs:
                target.copy_(source)
        if parameters:
            for pairs in self.params:
                for source, target in pairs:
                    target.copy_(source)


_END = object()  # what next() returns for an exhausted slice

_Result = tuple[Any, BaseException | None]  # (train_step's output, None) or (None, its error)


def _on_device(grads: GradientsParams, device: torch.device) -> GradientsParams:
    if all(grad.device == device for grad in grads.values()):
        return grads
    return GradientsParams({name: grad.to(device) for name, grad in grads.items()})


class _DeviceThreads:
    """One thread per device, named ``train-device-{i}``, running ``replicas[i].train_step``.

    Each thread takes batches from its own queue and puts ``(output, error)`` on its own result
    queue; :meth:`collect` waits for every device it sent a batch to before raising, so no
    thread is ever left mid-step, and :meth:`close` stops and joins them all.
    """

    def __init__(self, replicas: Sequence[nn.Module], devices: Sequence[torch.device]) -> None:
        self.devices = devices
        self._inputs: list[queue.SimpleQueue[tuple[Any] | None]] = []
        self._results: list[queue.SimpleQueue[_Result]] = []
        self._threads: list[threading.Thread] = []
        for i, (replica, device) in enumerate(zip(replicas, devices, strict=True)):
            inputs: queue.SimpleQueue[tuple[Any] | None] = queue.SimpleQueue()
            results: queue.SimpleQueue[_Result] = queue.SimpleQueue()
            thread = threading.Thread(
                target=_work,
                args=(replica, device, inputs, results),
                name=f"train-device-{i}",
                daemon=True,
            )
            self._inputs.append(inputs)
            self._results.append(results)
            self._threads.append(thread)
        for thread in self._threads:
            thread.start()

    def submit(self, device: int, batch: Any) -> None:
        """Hand ``batch`` to device ``device``'s thread."""
        self._inputs[device].put((batch,))

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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _work(
    replica: nn.Module,
    device: torch.device,
    inputs: queue.SimpleQueue[tuple[Any] | None],
    results: queue.SimpleQueue[_Result],
) -> None:
    """A device thread: ``train_step`` on every batch handed to it, until the ``None`` stop."""
    # A new thread would otherwise use all cores for OpenMP, ignoring torch.set_num_threads.
    torch.get_num_threads()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # per thread: tensors made with device="cuda" land here
    step = cast("TrainStep[Any, Any]", replica).train_step  # checked by Learner
    while (task := inputs.get()) is not None:
        try:
            results.put((step(task[0]), None))
        except BaseException as error:  # anything: collect() re-raises it on the training side
            results.put((None, error))
