"""Code of the user's that runs at epoch and split boundaries, and state that joins checkpoints.

A hooks object (``SupervisedTraining.with_hooks``, or the model itself when it has any of the
hooks) is called on the training thread, in the loop's event order; each hook it has is called,
and one it lacks is skipped (Keras' ``Callback`` pattern: :class:`Hooks` does nothing)::

    on_epoch_start(epoch)                        before the epoch's first event
    on_split_start(split, epoch)                 after StartSplit (train, then valid)
    on_split_end(split, epoch)                   after EndSplit
    on_epoch_end(epoch)                          after EndEpoch, before the checkpoint

so an LSTM can reset its hidden state when a split starts, and a GAN can dump samples when an
epoch ends. Subclass :class:`Hooks` and override what you need. These are four of the points a
callback has (``_callbacks/base.py``: ``SupervisedTraining.with_callbacks``, every point of the
loop with the run in reach); ``with_hooks`` objects are called as callbacks are, after the
model's hooks and before ``with_callbacks``' callbacks, and never join checkpoints.

Any object with ``state_dict()``/``load_state_dict()`` (:class:`Stateful`: a counter, an EMA of
the weights) joins every checkpoint under a name (``SupervisedTraining.with_stateful``): its
state is tensors and JSON values (nested dicts, lists, tuples), saved as safetensors + JSON,
and a resume puts it back before the first epoch, so the run stays bit-identical.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ember.train._vocabulary import Split

__all__ = ["HOOKS", "Hooks", "Stateful", "TrainingHooks", "has_hooks"]

HOOKS = ("on_epoch_start", "on_split_start", "on_split_end", "on_epoch_end")
"""The hooks' names, in the order the loop calls them."""


@runtime_checkable
class TrainingHooks(Protocol):
    """Called at the loop's epoch and split boundaries (see the module doc for the order)."""

    def on_epoch_start(self, epoch: int) -> None:
        """Epoch ``epoch`` begins."""
        ...

    def on_split_start(self, split: Split, epoch: int) -> None:
        """The ``split`` pass of ``epoch`` begins (after its StartSplit event)."""
        ...

    def on_split_end(self, split: Split, epoch: int) -> None:
        """The ``split`` pass of ``epoch`` ended (after its EndSplit event)."""
        ...

    def on_epoch_end(self, epoch: int) -> None:
        """Epoch ``epoch`` is complete (after EndEpoch, before its checkpoint)."""
        ...


class Hooks:
    """A :class:`TrainingHooks` that does nothing: subclass it and override what you need."""

    def on_epoch_start(self, epoch: int) -> None:
        """Nothing by default."""

    def on_split_start(self, split: Split, epoch: int) -> None:
        """Nothing by default."""

    def on_split_end(self, split: Split, epoch: int) -> None:
        """Nothing by default."""

    def on_epoch_end(self, epoch: int) -> None:
        """Nothing by default."""


def has_hooks(value: object) -> bool:
    """Whether ``value`` has any of the hooks (a method of one of :data:`HOOKS`' names)."""
    return any(callable(getattr(value, name, None)) for name in HOOKS)


@runtime_checkable
class Stateful(Protocol):
    """State that joins the checkpoints (torch's ``state_dict`` convention)."""

    def state_dict(self) -> dict[str, Any]:
        """The state: tensors and JSON values, nested in dicts, lists and tuples."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...
