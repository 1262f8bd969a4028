"""The task of a model trained without its own steps: which output its metrics read.

A plain ``nn.Module`` with a loss function, or a model whose forward returns its own loss (the
Hugging Face convention), has no output class of its own. ``Learner(model, optim, loss=...,
task=...)`` names the task, or leaves it to be told from the first batch (the inference and
its reason are written to ``experiment.log``)::

    task               output                                    feeds
    "classification"   ClassificationOutput(loss, scores, targets)   Loss, Accuracy, TopK, F-beta...
    "regression"       RegressionOutput(loss, output, targets)       Loss
    "multilabel"       MultiLabelClassificationOutput(...)           Loss, Hamming, F-beta...
    "causal-lm"        CausalLMOutput(loss, logits, labels)          Loss, Perplexity, Accuracy
    none told          LossOutput(loss, items=...)                   Loss

Told from the first batch: a binary cross-entropy loss is multi-label; integer targets with one
dimension fewer than the scores are classification; floating targets shaped as the output are
regression (unless the loss is a classification one: soft labels); an output that is not a
tensor (a tuple the loss reads) logs its loss only; a ``transformers`` causal language model
(``GPT2LMHeadModel``, ``*ForCausalLM``) is ``"causal-lm"``; a Hugging Face output with
``logits`` and integer ``labels`` is classification. Anything else logs its loss.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

from ember.train._outputs import (
    CausalLMOutput,
    ClassificationOutput,
    LossOutput,
    MultiLabelClassificationOutput,
    RegressionOutput,
    leading_size,
)

__all__ = ["Task", "check_task", "guess_task", "guess_task_of_model", "task_output"]

Task = Literal["classification", "regression", "multilabel", "causal-lm"]
"""What a plain model learns, which decides the output its metrics read."""

_MULTILABEL_LOSSES: tuple[Any, ...] = (
    F.binary_cross_entropy_with_logits,
    F.binary_cross_entropy,
    F.multilabel_soft_margin_loss,
    nn.BCEWithLogitsLoss,
    nn.BCELoss,
    nn.MultiLabelSoftMarginLoss,
)
_CLASSIFICATION_LOSSES: tuple[Any, ...] = (
    F.cross_entropy,
    F.nll_loss,
    nn.CrossEntropyLoss,
    nn.NLLLoss,
)


def check_task(task: object) -> Task | None:
    """``task`` if it is one of the tasks or None; ValueError naming the choices."""
    choices = get_args(Task)
    if task is not None and task not in choices:
        raise ValueError(
            f"task must be one of {', '.join(repr(c) for c in choices)} or None (told from "
            f"the first batch), got {task!r}"
        )
    return task  # type: ignore[return-value]  # checked above


def task_output(task: Task | None, loss: torch.Tensor, output: Any, targets: Any) -> Any:
    """The output of ``task`` for the metrics (:class:`LossOutput` without one, or without
    scores as a tensor, over the items of the targets or else of the output)."""
    if (
        task is None
        or not isinstance(output, torch.Tensor)
        or not isinstance(targets, torch.Tensor)
    ):
        items = leading_size(targets)
        return LossOutput(loss, items=leading_size(output) if items is None else items)
    if task == "classification":
        return ClassificationOutput(loss, output, targets)
    if task == "regression":
        return RegressionOutput(loss, output, targets)
    if task == "multilabel":
        return MultiLabelClassificationOutput(loss, output, targets)
    return CausalLMOutput(loss, output, targets)


def _is(loss: Callable[..., Any], kinds: tuple[Any, ...]) -> bool:
    """Whether ``loss`` is one of the functions, or an instance of one of the modules."""
    return any(
        loss is kind or (isinstance(kind, type) and isinstance(loss, kind)) for kind in kinds
    )


def guess_task(loss: Callable[..., Any], output: Any, targets: Any) -> tuple[Task | None, str]:
    """The task of ``loss(output, targets)`` and why (see the module doc)."""
    if not isinstance(output, torch.Tensor):
        return None, f"the model's output is a {type(output).__name__}, not a tensor of scores"
    if not isinstance(targets, torch.Tensor):
        return None, f"the targets are a {type(targets).__name__}, not a tensor"
    shapes = f"output {tuple(output.shape)}, targets {tuple(targets.shape)} {targets.dtype}"
    if _is(loss, _MULTILABEL_LOSSES) and output.shape == targets.shape:
        return "multilabel", f"a binary cross-entropy loss ({shapes})"
    if not targets.is_floating_point() and output.dim() == targets.dim() + 1:
        return "classification", f"integer targets, one dimension fewer than the output ({shapes})"
    if targets.is_floating_point() and output.shape == targets.shape:
        if _is(loss, _CLASSIFICATION_LOSSES):
            return None, f"a classification loss of soft labels ({shapes})"
        return "regression", f"floating targets shaped as the output ({shapes})"
    return None, f"no task fits {shapes}"


def _causal_lm(model: nn.Module) -> bool:
    """Whether ``model`` is a ``transformers`` causal language model."""
    if "transformers" not in sys.modules or not type(model).__module__.startswith("transformers"):
        name = type(model).__name__
        return name.endswith(("ForCausalLM", "LMHeadModel"))
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    names: set[str] = set()
    for value in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values():
        names.update((value,) if isinstance(value, str) else value)
    return type(model).__name__ in names


def guess_task_of_model(
    model: nn.Module, logits: torch.Tensor | None, labels: Any
) -> tuple[Task | None, str]:
    """The task of a model that computes its own loss, from its class and its ``logits`` and
    the batch's ``labels`` (see the module doc), and why."""
    name = type(model).__name__
    if logits is None or not isinstance(labels, torch.Tensor):
        return None, f"{name}'s output has no logits, or the batch no labels tensor"
    if _causal_lm(model):
        return "causal-lm", f"{name} is a causal language model"
    shapes = f"logits {tuple(logits.shape)}, labels {tuple(labels.shape)} {labels.dtype}"
    if not labels.is_floating_point() and logits.dim() == labels.dim() + 1:
        return "classification", f"integer labels, one dimension fewer than the logits ({shapes})"
    if labels.is_floating_point() and logits.shape == labels.shape and logits.shape[-1] > 1:
        return "multilabel", f"floating labels shaped as the logits ({shapes})"
    if labels.is_floating_point() and logits.numel() == labels.numel():
        return "regression", f"one floating label per output ({shapes})"
    return None, f"no task fits {shapes}"
