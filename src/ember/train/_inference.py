"""The inference pass: a model's outputs over a loader, as validation, the Evaluator and
``predict`` all compute them (one pass, so they cannot differ).

::

    for batch, progress in run.valid_pass(name):       # the loader placed under name: on its
                                                         # device, or this rank's share
        the main model in eval mode (again if the caller changed it between two outputs)
        under inference_mode (and autocast, under mixed precision):
            output = run.inference_step(batch, step)     # the model's inference_step, or step;
                                                         # None for a rank's empty share
            items, stopper = run.report([output], should_stop())
        each item with the progress after its own batch   # a run may hand back earlier
                                                          # batches' items later (DDP's chunks)
        stopper is not None: a rank asked to stop; the pass ends after this batch

Nothing is read back to the host here and no grad-mode state leaks to the caller: the pass
yields outside ``inference_mode``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import torch

from ember.data import Progress
from ember.train._strategy.base import Step, StrategyRun

__all__ = ["InferencePass"]


def _never() -> bool:
    return False


class InferencePass:
    """The outputs of ``run``'s main model over the loader placed under ``name``, each with the
    progress after its batch (see the module doc).

    ``autocast`` is the ``(device type, dtype)`` of mixed precision, or None; ``step`` replaces
    the model's ``inference_step``; ``should_stop`` is polled after every batch (validation's
    interrupter). After the loop, :attr:`stopper` is the rank that asked to stop, or None.
    """

    def __init__(
        self,
        run: StrategyRun,
        name: str,
        *,
        autocast: tuple[str, torch.dtype] | None = None,
        step: Step | None = None,
        should_stop: Callable[[], bool] = _never,
    ) -> None:
        self.run, self.name = run, name
        self.autocast, self.step, self.should_stop = autocast, step, should_stop
        self.stopper: int | None = None

    def __iter__(self) -> Iterator[tuple[Any, Progress]]:
        run, model = self.run, self.run.replicas[0]
        stamps: deque[Progress] = deque()  # each batch's progress until its item comes back
        for batch, progress in run.valid_pass(self.name):
            if model.training:
                model.eval()
            with torch.inference_mode():
                with torch.autocast(*self.autocast) if self.autocast else nullcontext():
                    output = run.inference_step(batch, self.step)
                stamps.append(progress)
                items, stopper = run.report([output], self.should_stop())
            for item in items:
                yield item, stamps.popleft()
            if stopper is not None:
                self.stopper = stopper
                return
