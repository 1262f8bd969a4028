"""The inference pass: a model's outputs over a loader, as validation, the Evaluator and
``predict`` all compute them (one pass, so they cannot differ).

::

    for batch, progress in run.valid_pass(name):       # the loader placed under name: on its
                                                         # device, or this rank's share
        the main model in eval mode (again if the caller changed it between two outputs)
        under inference_mode (and autocast, under mixed precision), in the batch's step
        context (split, epoch, iteration: the batch's index in the pass, from 1):
            output = run.inference_step(batch, step)     # the model's inference_step, or step;
                                                         # None for a rank's empty share
            items, _ = run.report([output], False)
        each item with the progress after its own batch   # a run may hand back earlier
        and the values its step logged                    # batches' items later (DDP's chunks)

A pass always runs to its end: a stop asked meanwhile is the caller's to act on after it (the
loop's, between two rounds), so a round's validation and its checkpoint stay whole. Nothing is
read back to the host here and no grad-mode state leaks to the caller: the pass yields outside
``inference_mode``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

import torch

from ember.data import Progress
from ember.train._step import StepContext, step_context
from ember.train._strategy.base import Step, StrategyRun

__all__ = ["inference_pass"]

Logged = dict[str, Any] | None
"""What a batch's step logged with ``current_step().log``, or None."""


def inference_pass(
    run: StrategyRun,
    name: str,
    *,
    autocast: tuple[str, torch.dtype] | None = None,
    step: Step | None = None,
    split: str | None = None,
    epoch: int = 0,
    optimizer_steps: int = 0,
) -> Iterator[tuple[Any, Progress, Logged]]:
    """The outputs of ``run``'s main model over the loader placed under ``name``, each with the
    progress after its batch and what its step logged (see the module doc); ``autocast`` is
    the ``(device type, dtype)`` of mixed precision, or None; ``step`` replaces the model's
    ``inference_step``; ``split`` (default ``name``), ``epoch`` and ``optimizer_steps`` are
    what the step context says."""
    model = run.replicas[0]
    stamps: deque[tuple[Progress, Logged]] = deque()  # each batch's, until its item comes back
    split = split or name
    no_graph = torch.inference_mode()  # entered anew for each batch: the pass yields outside it
    for iteration, (batch, progress) in enumerate(run.valid_pass(name), 1):
        if model.training:
            model.eval()
        context = StepContext(
            epoch, iteration, optimizer_steps, batch, autocast=autocast, split=split
        )
        with no_graph, step_context(context):
            if autocast is None:
                output = run.inference_step(batch, step)
            else:
                with torch.autocast(*autocast):
                    output = run.inference_step(batch, step)
            stamps.append((progress, context.values or None))
            items, _ = run.report([output], False)
        for item in items:
            at, values = stamps.popleft()
            yield item, at, values
