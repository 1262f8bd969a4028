"""The inference pass: a model's outputs over a loader, as validation, the Evaluator and
``predict`` all compute them (one pass, so they cannot differ).

::

    for batch, progress in run.valid_pass(name):       # the loader placed under name: on its
                                                         # device, or this rank's share
        the main model in eval mode (again if the caller changed it between two outputs)
        under inference_mode (and autocast, under mixed precision):
            output = run.inference_step(batch, step)     # the model's inference_step, or step;
                                                         # None for a rank's empty share
            items, _ = run.report([output], False)
        each item with the progress after its own batch   # a run may hand back earlier
                                                          # batches' items later (DDP's chunks)

A pass always runs to its end: a stop asked meanwhile is the caller's to act on after it (the
loop's, between two rounds), so a round's validation and its checkpoint stay whole. Nothing is
read back to the host here and no grad-mode state leaks to the caller: the pass yields outside
``inference_mode``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import nullcontext
from typing import Any

import torch

from ember.data import Progress
from ember.train._strategy.base import Step, StrategyRun

__all__ = ["inference_pass"]


def inference_pass(
    run: StrategyRun,
    name: str,
    *,
    autocast: tuple[str, torch.dtype] | None = None,
    step: Step | None = None,
) -> Iterator[tuple[Any, Progress]]:
    """The outputs of ``run``'s main model over the loader placed under ``name``, each with the
    progress after its batch (see the module doc); ``autocast`` is the ``(device type, dtype)``
    of mixed precision, or None; ``step`` replaces the model's ``inference_step``."""
    model = run.replicas[0]
    stamps: deque[Progress] = deque()  # each batch's progress until its item comes back
    for batch, progress in run.valid_pass(name):
        if model.training:
            model.eval()
        with torch.inference_mode():
            with torch.autocast(*autocast) if autocast else nullcontext():
                output = run.inference_step(batch, step)
            stamps.append(progress)
            items, _ = run.report([output], False)
        for item in items:
            yield item, stamps.popleft()
