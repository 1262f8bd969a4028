"""The steps of a model that has none: a plain ``nn.Module`` with a loss function, or a model
whose forward returns its own loss (``transformers``' models).

``Learner(model, optim, loss=F.cross_entropy)`` trains any ``nn.Module``; ``Learner(gpt2,
optim)`` trains a model whose output has a ``loss`` (a Hugging Face ``ModelOutput``, a dict
with ``"loss"``) with no wrapper. Both steps are what one would write in a ``LearnerModel``::

    with a loss function:                  without one:
        inputs, targets = parts(batch)         output = model(**batch)     # a mapping, or
        output = model(*inputs)                                            # model(batch)
        loss = loss_fn(scores(output), targets)                            # its .loss
        item = task_output(task, loss, scores(output), targets)            # its .logits and
                                                                           # the batch's labels
        TrainOutput.from_loss(model, loss, item)    (train_step)
        item                                        (inference_step)

``parts(batch)``: a tuple or list ``(x, y)`` (``(x1, ..., xn, y)``: the last value is the
targets), or a mapping or dataclass with one field named ``targets``, ``target``, ``labels``,
``label`` or ``y`` (the targets) and the inputs in the others: one input is passed as it is,
several by name. ``scores(output)``: an output's ``logits`` (a Hugging Face output, a dict with
``"logits"``), else the output as it is: a tensor, or a tuple the loss function reads itself
(minGPT's ``(logits, loss)``, a VAE's ``(recon, mu, logvar)``: ``loss=lambda out, y: ...``). The
task (the output the metrics read, ``_task.py``) is told from the first batch when not given,
and said in ``experiment.log``; it needs the scores as a tensor, so a tuple output logs its
loss only (``LossOutput``) and ``task=`` with one is refused at the first batch. Everything
after the step (precision, accumulation, clipping, strategies, checkpoints) is the same as for
a ``LearnerModel``. The first batch's mistakes (a batch without targets, a loss that fails on
the output or the shapes, a task the output cannot give, an input that is not a tensor: file
names, say) are named with what to write.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from ember.train._step import TrainOutput
from ember.train._task import Task, guess_task, guess_task_of_model, task_output

__all__ = ["TARGET_NAMES", "Loss", "PlainSteps", "batch_parts"]

log = logging.getLogger("ember.train")

TARGET_NAMES = ("targets", "target", "labels", "label", "y")
"""The names of the targets' field in a mapping or dataclass batch."""

Loss = Callable[[Any, Any], torch.Tensor]


class PlainSteps:
    """``train_step`` and ``inference_step`` of a model without them, run on the model given
    (the Learner's, or a strategy's replica of it); see the module doc."""

    def __init__(self, name: str, loss: Loss | None, task: Task | None) -> None:
        self.name = name
        self.loss = loss
        self.task = task
        self._told = task is not None  # whether the task is known (given, or told once)
        self._checked = False  # the first batch is run with its mistakes named
        self._lock = threading.Lock()  # device threads may run the first batches together

    def train_step(self, model: nn.Module, batch: Any) -> TrainOutput[Any]:
        """Forward, loss and backward on ``batch``: ``TrainOutput.from_loss`` of the loss."""
        loss, item = self.evaluate(model, batch)
        return TrainOutput.from_loss(model, loss, item)

    def inference_step(self, model: nn.Module, batch: Any) -> Any:
        """Forward and loss on ``batch``: the output the metrics read."""
        return self.evaluate(model, batch)[1]

    def evaluate(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, Any]:
        """The loss of ``batch`` and the output of the task."""
        if not self._checked:
            with self._lock:
                loss, scores, targets = self._first(model, batch)
                self._checked = True
        elif self.loss is None:
            loss, scores, targets = _own_loss(model, batch, self.name)
        else:
            inputs, targets = batch_parts(batch)
            scores = _scores(_call(model, inputs))
            loss = self.loss(scores, targets)
        return loss, task_output(self.task, loss, scores, targets)

    def _first(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, Any, Any]:
        """The first batch's loss, scores and targets, each mistake named; the task told."""
        if self.loss is None:
            loss, scores, targets = _own_loss(model, batch, self.name, first=True)
            if not self._told:
                self._tell(*guess_task_of_model(model, scores, targets))
            return loss, scores, targets
        inputs, targets = batch_parts(batch, checked=True)
        scores = _scores(_first_call(model, inputs, self.name))
        if self.task is not None and not isinstance(scores, torch.Tensor):
            raise _no_scores(self.name, self.task, scores)
        try:
            loss = self.loss(scores, targets)
        except (RuntimeError, ValueError, TypeError, IndexError) as error:
            raise ValueError(
                f"the loss {_name(self.loss)}(output, targets) failed on {self.name}'s output "
                f"{_shape(scores)} and the targets {_shape(targets)}: {error}. "
                f"{_fit_the_loss(scores)}"
            ) from error
        if not isinstance(loss, torch.Tensor):
            raise TypeError(
                f"the loss {_name(self.loss)} returned {type(loss).__name__}, not a tensor: "
                "compute it with torch (e.g. F.cross_entropy)"
            )
        if not self._told:
            self._tell(*guess_task(self.loss, scores, targets))
        return loss, scores, targets

    def _tell(self, task: Task | None, why: str) -> None:
        self.task, self._told = task, True
        if task is None:
            log.info(
                "%s trains with only its loss logged (%s): pass task='classification', "
                "'regression', 'multilabel' or 'causal-lm' to the Learner for metrics beyond Loss",
                self.name,
                why,
            )
        else:
            log.info(
                "%s trains as task=%r (told from the first batch: %s); pass task= to the "
                "Learner to choose",
                self.name,
                task,
                why,
            )


def batch_parts(batch: Any, *, checked: bool = False) -> tuple[Any, Any]:
    """``(inputs, targets)`` of ``batch`` (see the module doc); ``inputs`` is a tuple (passed
    in order) or a dict (passed by name). ``checked``: a batch that has no targets is named."""
    if isinstance(batch, tuple | list) and len(batch) >= 2:
        return tuple(batch[:-1]), batch[-1]
    if isinstance(batch, Mapping):
        fields = dict(batch)
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        fields = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    else:
        raise _no_targets(batch)
    names = [name for name in TARGET_NAMES if name in fields]
    if checked and (len(names) != 1 or len(fields) < 2):
        raise _no_targets(batch, sorted(fields))
    targets = fields.pop(names[0])
    if len(fields) == 1:
        return tuple(fields.values()), targets
    return fields, targets


def _no_targets(batch: Any, fields: list[str] | None = None) -> TypeError:
    kind = type(batch).__name__
    found = "" if fields is None else f" (its fields: {', '.join(fields)})"
    return TypeError(
        f"a batch of {kind}{found} has no targets ember can tell from its inputs: give batches "
        "as (inputs, targets) tuples, or mappings/dataclasses with the targets in one field "
        f"named {', '.join(TARGET_NAMES)} and the inputs in the others; or give the model its "
        "own train_step and inference_step (subclass LearnerModel)"
    )


def _call(model: nn.Module, inputs: Any) -> Any:
    """``model(*inputs)``, or ``model(**inputs)`` for named inputs."""
    if isinstance(inputs, dict):
        return model(**inputs)
    return model(*inputs)


def _first_call(model: nn.Module, inputs: Any, name: str) -> Any:
    """:func:`_call` on the first batch: a forward that fails while an input is not a tensor
    (file names a dataset gave, say) is named with that input and the fix (a TypeError chained
    to the model's error); a model that takes other inputs on purpose runs as it is."""
    try:
        return _call(model, inputs)
    except (TypeError, AttributeError) as error:  # torch's "must be Tensor", "no attribute"
        values = list(inputs.values()) if isinstance(inputs, dict) else list(inputs)
        named = dict(zip(_input_names(inputs), values, strict=True))
        field = next((k for k, v in named.items() if not isinstance(v, torch.Tensor)), None)
        if field is None:
            raise
        value = named[field]
        raise TypeError(
            f"{name}'s forward failed on the batch's input {field}, which is {_kind(value)}, "
            f"not a tensor ({error}). Make the items' inputs tensors before they are batched: "
            "in the dataset (e.g. read the image a file name names, in __getitem__), or in a "
            "batcher that returns tensors (DataLoaderBuilder(batcher).batch_size(32)"
            ".build(dataset), batcher(items, device) stacking each item's tensors)"
        ) from error


def _input_names(inputs: Any) -> list[str]:
    """How a message names the inputs: a mapping's keys; ``x`` of an ``(x, y)`` batch, else
    ``x1``, ``x2``..."""
    if isinstance(inputs, dict):
        return list(inputs)
    if len(inputs) == 1:
        return ["x (the first value of an (x, y) batch)"]
    return [f"x{index} (value {index} of the batch)" for index in range(1, len(inputs) + 1)]


def _kind(value: Any) -> str:
    """``a list of 32 str (['cat.png', 'dog.png', ...])``, or ``a str ('cat.png')``."""
    if isinstance(value, list | tuple) and value:
        kinds = sorted({type(v).__name__ for v in value})
        shown = ", ".join(repr(v)[:40] for v in value[:2])
        more = ", ..." if len(value) > 2 else ""
        return f"a {type(value).__name__} of {len(value)} {'/'.join(kinds)} ([{shown}{more}])"
    return f"a {type(value).__name__} ({repr(value)[:60]})"


def _scores(output: Any) -> Any:
    """What the loss reads: the output tensor, or an output's ``logits``."""
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, Mapping):
        return output.get("logits", output)
    return getattr(output, "logits", output)


def _fit_the_loss(output: Any) -> str:
    """What to do when the loss fails on ``output``: fit the shapes, or read a tuple."""
    if isinstance(output, torch.Tensor):
        return (
            "Make the model's output and the batch's targets fit the loss (e.g. "
            "F.cross_entropy: scores [B, C] and class indices [B]; F.mse_loss: the same shape)"
        )
    return (
        "The loss gets the model's output as it is: read its parts in the loss (e.g. "
        "loss=lambda out, y: F.cross_entropy(out[0], y) for a (scores, ...) tuple)"
    )


def _no_scores(name: str, task: str, output: Any) -> TypeError:
    return TypeError(
        f"task={task!r} reads the scores from {name}'s output, and its forward returned "
        f"{_shape(output)}: the metrics of a task need the scores as a tensor (or an object "
        "with .logits). Leave task= out to train it with Loss only (the loss function reads "
        "the output as it is), or give the model its own train_step and inference_step "
        "(subclass LearnerModel) returning an output that holds the scores (e.g. "
        "ClassificationOutput(loss, scores, targets))"
    )


def _own_loss(
    model: nn.Module, batch: Any, name: str, *, first: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None, Any]:
    """A model that computes its loss: ``model(**batch)`` (``model(batch)``), its ``loss``,
    ``logits`` and the batch's ``labels``; an output without a loss is named (``name``: the
    model's), and on the ``first`` batch a tuple batch too."""
    mapping = isinstance(batch, Mapping)
    if first and isinstance(batch, tuple | list):
        raise TypeError(
            f"{name} has no train_step and the Learner no loss, so the batch goes to "
            f"{name}(batch) whole, and this one is a {type(batch).__name__}: pass loss= to "
            "train loss(model(x), y) on (x, y) batches (Learner(model, optim, "
            "loss=F.cross_entropy)); a model that computes its own loss takes mapping batches "
            "(model(**batch))"
        )
    output = model(**batch) if mapping else model(batch)
    if isinstance(output, Mapping):
        loss, logits = output.get("loss"), output.get("logits")
    else:
        loss, logits = getattr(output, "loss", None), getattr(output, "logits", None)
    if not isinstance(loss, torch.Tensor):
        call = f"{name}(**batch)" if mapping else f"{name}(batch)"
        raise TypeError(
            f"{call} returned {type(output).__name__} without a loss: pass loss= to the Learner "
            "(e.g. Learner(model, optim, loss=F.cross_entropy)), give a Hugging Face model "
            "the batch's labels (batch['labels'], so that it computes its loss), or return an "
            "object with .loss (a dict with 'loss')"
        )
    labels = batch.get("labels") if mapping else None
    return loss, logits, labels


def _name(loss: Any) -> str:
    return getattr(loss, "__name__", None) or type(loss).__name__


def _shape(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"of shape {tuple(value.shape)} ({value.dtype})"
    if isinstance(value, tuple | list):
        parts = ", ".join(
            f"tensor {tuple(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__
            for v in value
        )
        return f"a {type(value).__name__} ({parts})"
    return f"of type {type(value).__name__}"
