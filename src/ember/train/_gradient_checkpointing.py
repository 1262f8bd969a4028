"""Gradient checkpointing: recompute chosen submodules' activations in the backward pass.

``SupervisedTraining.gradient_checkpointing()`` (Burn's option of the same name) trades compute
for memory: the strategies call :func:`apply_gradient_checkpointing` on the model when a fit
starts and undo it when it ends, so the model ``launch`` returns is a plain one again.

Each chosen module's ``forward`` is replaced, on that instance only, by one that runs the
original through ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``: the module keeps
its inputs for the backward pass and recomputes its intermediate activations there, instead of
keeping them from the forward pass. Losses and gradients are those of the plain model:

* random operations inside a checkpointed module (dropout) draw the same numbers when they are
  recomputed, because torch saves and restores the RNG state (``preserve_rng_state=True``, the
  default) of the CPU and of the devices of the module's tensor inputs;
* outside autograd (validation runs under ``torch.inference_mode()``) the original forward runs
  as is: there is nothing to recompute;
* hooks registered on a checkpointed module run once per call, outside the checkpoint.

What changes: each checkpointed module's forward runs twice per training step, so a module whose
forward has side effects repeats them in the backward pass. The usual one is BatchNorm in train
mode, whose running statistics are updated twice per step; checkpoint the modules around it, not
a module containing it, when the running statistics matter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from types import TracebackType
from typing import Any, Self

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

__all__ = [
    "GradientCheckpointing",
    "apply_gradient_checkpointing",
    "check_module_names",
    "checkpointed",
    "checkpointed_modules",
]


def check_module_names(modules: Sequence[str]) -> tuple[str, ...]:
    """``modules`` as a tuple of dotted submodule names: non-empty, distinct, no bare str.

    Whether the names exist is checked against a model by :func:`checkpointed_modules`.
    """
    if isinstance(modules, str) or not isinstance(modules, Sequence):
        raise TypeError(
            f"modules must be a sequence of dotted submodule names, got {modules!r}; "
            "pass a list, e.g. ['encoder.0', 'encoder.1']"
        )
    names = tuple(modules)
    if not names:
        raise ValueError("modules must name at least one submodule, got an empty sequence")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"modules must be non-empty dotted names, got {name!r}")
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"modules names a submodule more than once: {', '.join(duplicates)}")
    return names


def checkpointed_modules(model: nn.Module, modules: Sequence[str] | None = None) -> tuple[str, ...]:
    """The names of the submodules of ``model`` to checkpoint: ``modules``, or its direct children.

    Raises ValueError naming every unknown name (and listing the direct children), or when
    ``modules`` is None and the model has no children.
    """
    children = tuple(name for name, _ in model.named_children())
    if modules is None:
        if not children:
            raise ValueError(
                f"{type(model).__name__} has no child modules to checkpoint; name the modules "
                "to checkpoint, or leave gradient checkpointing off"
            )
        return children
    names = check_module_names(modules)
    unknown = [name for name in names if not _has_submodule(model, name)]
    if unknown:
        raise ValueError(
            f"{type(model).__name__} has no submodule {', '.join(map(repr, unknown))} "
            f"(its direct children: {', '.join(children) or 'none'})"
        )
    return names


def _has_submodule(model: nn.Module, name: str) -> bool:
    try:
        model.get_submodule(name)
    except AttributeError:
        return False
    return True


class _CheckpointedForward:
    """The ``forward`` installed on a checkpointed module.

    A callable object rather than a closure, so that ``copy.deepcopy`` of the model rebinds
    ``forward`` (a bound method) to the copy instead of leaving the copy calling the original.
    """

    __slots__ = ("forward",)

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not torch.is_grad_enabled():
            return self.forward(*args, **kwargs)
        return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)


class GradientCheckpointing:
    """What :func:`apply_gradient_checkpointing` did; :meth:`remove` undoes it.

    Also a context manager that removes it on exit.
    """

    def __init__(self, modules: tuple[str, ...]) -> None:
        self.modules = modules
        """The dotted names of the checkpointed submodules."""
        self._installed: list[tuple[nn.Module, _CheckpointedForward, Any]] = []

    def _install(self, module: nn.Module) -> None:
        previous = vars(module).get("forward")  # an instance-level forward someone set, or None
        wrapper = _CheckpointedForward(module.forward)
        vars(module)["forward"] = wrapper
        self._installed.append((module, wrapper, previous))

    @property
    def active(self) -> bool:
        """True until :meth:`remove` has run."""
        return bool(self._installed)

    def remove(self) -> None:
        """Give every checkpointed module its own forward back. Idempotent.

        RuntimeError if a module's forward was replaced again meanwhile: undo such wrappers in
        the reverse order of applying them.
        """
        while self._installed:
            module, wrapper, previous = self._installed[-1]
            if vars(module).get("forward") is not wrapper:
                raise RuntimeError(
                    f"the forward of {type(module).__name__} was replaced after gradient "
                    "checkpointing was applied; undo wrappers in the reverse order"
                )
            self._installed.pop()
            if previous is None:
                del vars(module)["forward"]
            else:
                vars(module)["forward"] = previous

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"GradientCheckpointing(modules={self.modules!r}, active={self.active})"


def apply_gradient_checkpointing(
    model: nn.Module, modules: Sequence[str] | None = None
) -> GradientCheckpointing:
    """Checkpoint ``modules`` of ``model`` (dotted names; default: its direct children).

    Their activations are recomputed in the backward pass through
    ``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``. Returns the handle that
    undoes it. A module reachable under several names is wrapped once. ValueError naming
    unknown names, before anything is changed.
    """
    names = checkpointed_modules(model, modules)
    handle = GradientCheckpointing(names)
    seen: set[int] = set()
    for name in names:
        module = model.get_submodule(name)
        if id(module) not in seen:
            seen.add(id(module))
            handle._install(module)
    return handle


@contextmanager
def checkpointed(modules: tuple[str, ...] | None, *models: nn.Module) -> Iterator[None]:
    """Within the block, ``modules`` of every model in ``models`` are checkpointed.

    This is how a strategy applies ``TrainingComponents.gradient_checkpointing``: with
    ``modules`` None (the setting is off) nothing changes.
    """
    with ExitStack() as stack:
        if modules is not None:
            for model in models:
                stack.enter_context(apply_gradient_checkpointing(model, modules))
        yield
