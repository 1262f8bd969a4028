"""``Profiler``: ``torch.profiler`` traces of chosen train steps, in the run directory.

Written on the public callbacks alone. The profiler starts with the run and advances once per
train batch; torch's schedule picks the batches traced: ``skip_first`` batches ignored, then
cycles of ``wait`` batches idle, ``warmup`` batches traced but discarded (the profiler's own
start-up cost) and ``active`` batches recorded, ``repeat`` times (0: until the run ends). Each
recorded cycle is written by ``torch.profiler.tensorboard_trace_handler`` as
``DIR/profiler/{worker}.{time}.pt.trace.json``: TensorBoard's profiler plugin reads the folder
(``tensorboard --logdir DIR/profiler``), and Chrome's trace viewer (``chrome://tracing``,
Perfetto) opens each file. ``worker`` is ``rank{N}``: every process of a data-parallel run writes
its own traces. The profiler stops when the run ends or fails.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import torch

from ember._checks import check_int
from ember.train._callbacks.base import Callback, RunView

__all__ = ["Profiler"]


class Profiler(Callback):
    """``torch.profiler`` traces of the train batches its schedule chooses, in the run directory.

    Written to ``directory`` (relative to the run directory; default ``profiler``); see the
    module doc. ``activities`` default to the CPU and, where there is one, CUDA; the other
    options are ``torch.profiler.profile``'s."""

    def __init__(
        self,
        *,
        wait: int = 1,
        warmup: int = 1,
        active: int = 3,
        repeat: int = 1,
        skip_first: int = 0,
        directory: str | os.PathLike[str] = "profiler",
        activities: Iterable[torch.profiler.ProfilerActivity] | None = None,
        record_shapes: bool = False,
        profile_memory: bool = False,
        with_stack: bool = False,
    ) -> None:
        self.schedule = {
            "wait": check_int("wait", wait, minimum=0),
            "warmup": check_int("warmup", warmup, minimum=0),
            "active": check_int("active", active, minimum=1),
            "repeat": check_int("repeat", repeat, minimum=0),
            "skip_first": check_int("skip_first", skip_first, minimum=0),
        }
        self.directory = os.fspath(directory)
        if os.path.isabs(self.directory) or ".." in self.directory.split(os.sep):
            raise ValueError(
                f"directory is a folder inside the run directory, got {self.directory!r}: give "
                "a relative path such as 'profiler'"
            )
        self.activities = None if activities is None else list(activities)
        self.record_shapes, self.profile_memory, self.with_stack = (
            record_shapes,
            profile_memory,
            with_stack,
        )
        self._profiler: torch.profiler.profile | None = None

    def on_run_start(self, run: RunView) -> None:
        activities = self.activities
        if activities is None:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
        folder = run.directory / self.directory
        self._profiler = torch.profiler.profile(
            activities=activities,
            schedule=torch.profiler.schedule(**self.schedule),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                os.fspath(folder), worker_name=f"rank{run.rank}"
            ),
            record_shapes=self.record_shapes,
            profile_memory=self.profile_memory,
            with_stack=self.with_stack,
        )
        self._profiler.start()

    def on_train_batch_end(self, step: RunView) -> None:
        if self._profiler is not None:
            self._profiler.step()

    def on_run_end(self, run: RunView) -> None:
        self._stop()

    def on_error(self, error: BaseException) -> None:
        self._stop()

    def _stop(self) -> None:
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.stop()

    def __repr__(self) -> str:
        options: dict[str, Any] = {**self.schedule, "directory": self.directory}
        return "Profiler(" + ", ".join(f"{k}={v!r}" for k, v in options.items()) + ")"
