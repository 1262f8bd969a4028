"""Code of the user's that runs at epoch and split boundaries, and state that joins checkpoints.

A hooks object (``SupervisedTraining.with_hooks``, or the model itself when it implements
:class:`TrainingHooks`) is called on the training thread, in the loop's event order::

    on_epoch_start(epoch)                        before the epoch's first event
    on_split_start(split, epoch)                 after StartSplit (train, then valid)
    on_split_end(split, epoch)                   after EndSplit
    on_epoch_end(epoch)                          after EndEpoch, before the checkpoint

so an LSTM can reset its hidden state when a split starts, and a GAN can dump samples when an
epoch ends. Subclass :class:`Hooks` and override what you need.

Any object with ``state_dict()``/``load_state_dict()`` (:class:`Stateful`: a counter, an EMA of
the weights) joins every checkpoint under a name (``SupervisedTraining.with_stateful``): its
state is tensors and JSON values (nested dicts, lists, tuples), saved as safetensors + JSON,
and a resume puts it back before the first epoch, so the run stays bit-identical.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ember.train._vocabulary import Split

__all__ = ["Hooks", "Stateful", "TrainingHooks"]


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


@runtime_checkable
class Stateful(Protocol):
    """State that joins the checkpoints (torch's ``state_dict`` convention)."""

    def state_dict(self) -> dict[str, Any]:
        """The state: tensors and JSON values, nested in dicts, lists and tuples."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        ...
