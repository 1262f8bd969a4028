"""Any ``torch.optim.lr_scheduler.LRScheduler`` as an ember scheduler, with a JSON state.

:class:`TorchLrScheduler` reconciles torch's "lr after the optimizer step" with ember's "lr
before it" (see the class doc). Its state goes into checkpoints as JSON, never pickled, so
torch's state dict is encoded here: tensors, ``Counter`` objects and dicts with non-string keys
get tagged forms that :func:`_from_json` turns back.
"""

from __future__ import annotations

import collections
import functools
import numbers
import warnings
from typing import Any

import torch
from torch.optim.lr_scheduler import LambdaLR, LRScheduler, ReduceLROnPlateau

from ember.train._lr_scheduler.validation import check_state, state_count

__all__ = ["TorchLrScheduler", "interval_notice"]


class TorchLrScheduler:
    """Adapter: a ``torch.optim.lr_scheduler.LRScheduler`` as an ember :class:`LrScheduler`.

    PyTorch's loop is ``optimizer.step(); scheduler.step()``: the lr used by the k-th optimizer
    step is ``scheduler.get_last_lr()`` *before* the k-th ``scheduler.step()`` (the first one is the
    value set when the scheduler was built). ember's Learner instead asks for the lr *before* each
    optimizer step. The adapter reconciles the two lazily:

    * the first ``step()`` returns ``get_last_lr()[0]`` without advancing the torch scheduler;
    * every later ``step()`` first advances it with ``scheduler.step()`` and returns the new
      ``get_last_lr()[0]``. That advance comes after the previous optimizer step, as PyTorch
      requires, so its "lr_scheduler.step() before optimizer.step()" warning does not fire.

    So the k-th lr handed out is exactly the lr of the k-th optimizer step of the canonical torch
    loop. Wrap a scheduler built on the optimizer the Learner steps (its wrapped ``step`` is how
    torch checks the order). Right before advancing, the adapter puts the torch scheduler's own
    last lrs back into that optimizer's param groups: chainable schedulers (``ExponentialLR``,
    ``CosineAnnealingLR``, …) compute the next lr from ``group["lr"]``, so whatever was written
    there since (the Learner writes the lr it uses, which for a :class:`ComposedLr` child is the
    combined one) cannot bend the schedule, and a scheduler restored by :meth:`load_state_dict`
    continues exactly even when the optimizer's state was not restored.

    Param groups: ``step()`` returns group 0's lr, and the Learner writes that one lr into every
    group, so per-group lrs of a torch scheduler are not used by it; :meth:`step_all` advances
    the same way and returns every group's lr, for callers that apply them per group. Other
    hyper-parameters a torch scheduler drives (momentum in ``OneCycleLR``, ``CyclicLR``) live in
    the optimizer and are restored with the optimizer's state.

    State: ``{"kind": "torch", "class": "<torch class name>", "step": calls so far,
    "scheduler": <the torch scheduler's state_dict as JSON>}``. Tensors (tensor lrs) are stored as
    ``{"__tensor__": {"dtype", "data"}}`` and come back on the CPU; ``Counter`` objects and dicts
    with non-string keys (``MultiStepLR``'s milestones) as ``{"__counter__"|"__dict__": [[key,
    value], …]}``. Plain functions and lambdas (``LambdaLR``, ``CyclicLR``'s ``scale_fn``) are
    not part of torch's state: the new scheduler must be built with them again. A callable
    *object* is saved through its ``__dict__``; a value that cannot be made JSON makes
    :meth:`state_dict` raise ``TypeError`` naming where it is.

    ``interval="epoch"`` advances the torch scheduler once per epoch, after validation, as
    ``scheduler.step()`` at the end of each epoch of a raw loop (``StepLR(step_size=1)`` in
    pytorch/examples' mnist); ``step()`` then gives the current lr. ``ReduceLROnPlateau`` is
    always stepped that way, with ``monitor``: the name of a metric registered on the
    validation split, whose epoch value each advance is given. Without ``interval`` (or a torch
    scheduler handed to the Learner bare) it is ``"step"``, and the launch says so
    (``interval_notice``): the two conventions are both common.

    When training ends, :meth:`end_training` gives a per-step scheduler the advance it owes the
    last optimizer step, so the optimizer's lrs and the torch scheduler's state are where a raw
    loop leaves them; the next :meth:`step` then does not advance again.
    """

    __slots__ = (
        "_caught_up",
        "_chosen",
        "_interval",
        "_monitor",
        "_resumed",
        "_scheduler",
        "_step",
    )

    def __init__(
        self,
        scheduler: LRScheduler | ReduceLROnPlateau,
        interval: str | None = None,
        monitor: str | None = None,
    ) -> None:
        if not isinstance(scheduler, LRScheduler | ReduceLROnPlateau):
            raise TypeError(
                "scheduler must be a torch.optim.lr_scheduler.LRScheduler, "
                f"got {type(scheduler).__qualname__}"
            )
        self._chosen = interval is not None
        interval = "step" if interval is None else interval
        if interval not in ("step", "epoch"):
            raise ValueError(f"interval must be 'step' or 'epoch', got {interval!r}")
        plateau = isinstance(scheduler, ReduceLROnPlateau)
        if plateau and not (isinstance(monitor, str) and monitor):
            raise TypeError(
                "ReduceLROnPlateau is stepped with a validation metric: give its name, e.g. "
                "TorchLrScheduler(scheduler, monitor='Loss')"
            )
        if monitor is not None and not plateau:
            raise ValueError(f"monitor is for ReduceLROnPlateau, not {type(scheduler).__name__}")
        self._scheduler = scheduler
        self._interval = "epoch" if plateau else interval
        self._monitor = monitor
        self._step = 0
        # True between load_state_dict() and the first advance after it (see _advance).
        self._resumed = False
        self._caught_up = False  # end_training() took the advance the next step() owes

    @property
    def scheduler(self) -> LRScheduler | ReduceLROnPlateau:
        """The wrapped torch scheduler."""
        return self._scheduler

    @property
    def interval(self) -> str:
        """``"step"`` (advanced before every optimizer step) or ``"epoch"``."""
        return self._interval

    @property
    def monitor(self) -> str | None:
        """The validation metric a ``ReduceLROnPlateau`` is stepped with, or None."""
        return self._monitor

    def step(self) -> float:
        """Return the lr of param group 0 for the coming optimizer step (see the class doc)."""
        if self._interval == "step":
            if self._step > 0 and not self._caught_up:
                self._advance(None)
            self._caught_up = False
            self._step += 1
        return float(self._scheduler.get_last_lr()[0])

    def end_training(self) -> None:
        """Training ended: a per-step scheduler takes the advance it owes the last optimizer
        step (torch's ``scheduler.step()`` after ``optimizer.step()``), which also writes the
        new lrs into the optimizer's param groups, as a raw loop leaves them."""
        if self._interval == "step" and self._step > 0 and not self._caught_up:
            self._advance(None)
            self._caught_up = True

    def end_epoch(self, value: float | None) -> None:
        """An epoch ended: advance an ``interval="epoch"`` scheduler (with ``value`` for a
        ``ReduceLROnPlateau``); a per-step scheduler is left alone."""
        if self._interval == "epoch":
            self._advance(value)
            self._step += 1

    def step_all(self) -> list[float]:
        """Like :meth:`step`, but return the lr of every param group, in group order."""
        self.step()
        return [float(lr) for lr in self._scheduler.get_last_lr()]

    def _advance(self, value: float | None) -> None:
        # Chainable torch schedulers compute the next lr from group["lr"]: give them back their
        # own last value, whatever the Learner (or a ComposedLr) has written there since.
        groups = self._scheduler.optimizer.param_groups
        for group, lr in zip(groups, self._scheduler.get_last_lr(), strict=True):
            _set_group_lr(group, lr)
        if not self._resumed:
            self._step_torch(value)
            return
        self._resumed = False
        # The optimizer step this advance follows happened before the checkpoint, so on a fresh
        # optimizer torch's "called before optimizer.step()" check (made only on the scheduler's
        # first real step) would be a false alarm; it is silenced for this one call only.
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message=r"Detected call of `lr_scheduler\.step\(\)` before `optimizer\.step\(\)`",
                category=UserWarning,
            )
            self._step_torch(value)

    def _step_torch(self, value: float | None) -> None:
        if isinstance(self._scheduler, ReduceLROnPlateau):
            if value is None:
                raise ValueError(
                    f"ReduceLROnPlateau needs the validation {self._monitor!r} of the epoch, "
                    "and none was logged"
                )
            self._scheduler.step(value)
        else:
            self._scheduler.step()

    def state_dict(self) -> dict[str, Any]:
        """The adapter's call counter and the torch scheduler's state, as JSON values (and
        ``"caught_up": true`` after :meth:`end_training`)."""
        state: dict[str, Any] = {
            "kind": "torch",
            "class": type(self._scheduler).__qualname__,
            "step": self._step,
            "scheduler": _to_json(self._scheduler.state_dict(), "scheduler"),
        }
        if self._caught_up:
            state["caught_up"] = True
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the call counter and the torch scheduler's state."""
        caught_up = state.get("caught_up", False) if isinstance(state, dict) else False
        optional = ("caught_up",) if isinstance(state, dict) and "caught_up" in state else ()
        check_state(state, self, "torch", ("class", "step", "scheduler", *optional))
        if not isinstance(caught_up, bool):
            raise ValueError(
                f"TorchLrScheduler state['caught_up'] must be a bool, got {caught_up!r}"
            )
        expected = type(self._scheduler).__qualname__
        if state["class"] != expected:
            raise ValueError(
                f"cannot load the state of a torch {state['class']!r} into a TorchLrScheduler "
                f"wrapping {expected!r}"
            )
        step = state_count(state, "step", self)
        torch_state = state["scheduler"]
        if not isinstance(torch_state, dict):
            raise ValueError(
                f"TorchLrScheduler state['scheduler'] must be a dict, "
                f"got {type(torch_state).__qualname__}"
            )
        decoded = _from_json(torch_state)
        before = self._scheduler.state_dict()
        self._scheduler.load_state_dict(decoded)
        groups = len(self._scheduler.optimizer.param_groups)
        lrs = len(self._scheduler.get_last_lr())
        if lrs != groups:
            self._scheduler.load_state_dict(before)
            raise ValueError(
                f"the loaded torch scheduler state has {lrs} lrs but the optimizer has {groups} "
                "param groups"
            )
        self._step = step
        self._caught_up = caught_up
        self._resumed = step > 0 and not caught_up

    def __repr__(self) -> str:
        last = [float(lr) for lr in self._scheduler.get_last_lr()]
        return (
            f"TorchLrScheduler({type(self._scheduler).__qualname__}, last_lr={last}, "
            f"step={self._step})"
        )


def interval_notice(scheduler: object, within: str | None = None) -> str | None:
    """What the launch says about a torch scheduler whose interval nobody chose (handed to the
    Learner bare, or ``TorchLrScheduler(scheduler)``, also as a child of a ``ComposedLr`` or
    ``SequentialLr``: ``within`` names it): it is stepped after every optimizer step, and how
    to choose; None when there is no such scheduler, or it is one of ``transformers``' (a step
    schedule by design: :func:`_from_transformers`)."""
    if not isinstance(scheduler, TorchLrScheduler):
        for child in getattr(scheduler, "schedulers", ()):  # ComposedLr, SequentialLr
            notice = interval_notice(child, type(scheduler).__name__)
            if notice is not None:
                return notice
        return None
    if scheduler._chosen or scheduler.interval != "step":  # ReduceLROnPlateau: per epoch
        return None
    if _from_transformers(scheduler.scheduler):
        return None
    name = type(scheduler.scheduler).__qualname__
    where = "handed to the Learner" if within is None else f"in the {within}"
    how = "pass" if within is None else "hand it to the Learner on its own as"
    return (
        f"the torch scheduler {name} {where} is stepped after every optimizer step "
        '(interval="step", as Hugging Face does); to step it once per epoch, after validation '
        f"(as pytorch/examples and Lightning do), {how} TorchLrScheduler(scheduler, "
        'interval="epoch"); TorchLrScheduler(scheduler, interval="step") keeps this and is '
        "silent"
    )


def _from_transformers(scheduler: object) -> bool:
    """Whether ``scheduler`` is made by ``transformers`` (``get_cosine_schedule_with_warmup``,
    ``get_linear_schedule_with_warmup``, ``get_scheduler(...)``): a ``LambdaLR`` whose every
    lambda is a function of a ``transformers`` module (``transformers.optimization``), wrapped
    in ``functools.partial`` or not. Told without importing ``transformers``."""
    if not isinstance(scheduler, LambdaLR):
        return False

    def module(function: Any) -> str:
        while isinstance(function, functools.partial):
            function = function.func
        return str(getattr(function, "__module__", None) or "")  # a callable may have none

    return all(module(f).startswith("transformers.") for f in scheduler.lr_lambdas)


# --- torch state <-> JSON --------------------------------------------------------------------

_TENSOR = "__tensor__"
_COUNTER = "__counter__"
_DICT = "__dict__"


def _to_json(value: object, where: str) -> Any:
    """A JSON-compatible copy of a torch scheduler state; ``where`` names the position in errors."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, torch.Tensor):
        dtype = str(value.dtype).removeprefix("torch.")
        return {_TENSOR: {"dtype": dtype, "data": value.detach().cpu().tolist()}}
    if isinstance(value, list | tuple):
        return [_to_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        if type(value) is dict and all(isinstance(key, str) for key in value):
            return {key: _to_json(item, f"{where}.{key}") for key, item in value.items()}
        tag = _COUNTER if isinstance(value, collections.Counter) else _DICT
        return {
            tag: [
                [_to_json(key, f"{where} key"), _to_json(item, f"{where}[{key!r}]")]
                for key, item in value.items()
            ]
        }
    raise TypeError(
        f"torch scheduler state {where} is a {type(value).__qualname__}, which cannot be stored "
        "as JSON"
    )


def _from_json(value: Any) -> Any:
    """Undo :func:`_to_json`."""
    if isinstance(value, list):
        return [_from_json(item) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and _TENSOR in value:
        spec = value[_TENSOR]
        dtype = getattr(torch, str(spec["dtype"]), None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"unknown tensor dtype {spec['dtype']!r} in torch scheduler state")
        return torch.tensor(spec["data"], dtype=dtype)
    if len(value) == 1 and (_COUNTER in value or _DICT in value):
        pairs = [(_hashable(_from_json(key)), _from_json(item)) for key, item in _single(value)]
        return collections.Counter(dict(pairs)) if _COUNTER in value else dict(pairs)
    return {key: _from_json(item) for key, item in value.items()}


def _single(value: dict[str, Any]) -> list[list[Any]]:
    (pairs,) = value.values()
    if not isinstance(pairs, list):
        raise ValueError(f"malformed torch scheduler state entry {value!r}")
    return pairs


def _hashable(key: Any) -> Any:
    # A tuple key was stored as a list.
    return tuple(_hashable(item) for item in key) if isinstance(key, list) else key


def _set_group_lr(group: dict[str, Any], lr: float | torch.Tensor) -> None:
    # A tensor lr is updated in place: a capturable or compiled optimizer holds on to that tensor.
    current = group["lr"]
    if isinstance(current, torch.Tensor):
        current.fill_(lr)
    else:
        # get_last_lr() tensors must not alias a group's lr (torch fills group lrs in place).
        group["lr"] = lr.clone() if isinstance(lr, torch.Tensor) else lr
