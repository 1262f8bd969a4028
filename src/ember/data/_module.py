"""``DataModule``: everything about a run's data in one class (Lightning's ``LightningDataModule``).

::

    @dataclass
    class Digits(DataModule):
        batch_size: int = 32             # plain values: ember.cli fills them from a config
        root: Path = Path("data")

        def prepare(self) -> None:       # once per machine, on its main process: download,
            ...                          # unpack, tokenize to disk (nothing kept on self)

        def setup(self) -> None:         # every process: read what prepare made
            self.train_set, self.valid_set = ...

        def train_loader(self):
            return DataLoaderBuilder().batch_size(self.batch_size).shuffle(0).build(self.train_set)

        def valid_loader(self):
            return DataLoaderBuilder().batch_size(256).build(self.valid_set)

    SupervisedTraining("runs/digits", Digits(batch_size=64))   # in place of the two loaders

At launch, training calls ``prepare()`` on the main process of each machine (the only process,
or local rank 0 of a data-parallel job; the others wait for it), then ``setup()`` on every
process, then the loaders: ``train_loader()`` and, for a run that validates, ``valid_loader()``
(a run validates when the class overrides it). Each returns an ember loader or a
``torch.utils.data.DataLoader``; ``valid_loader`` may return a mapping of named ones.
``test_loader()`` and ``predict_loader()`` are for what follows training (``with_test``,
``predict``). A data module with ``state_dict()``/``load_state_dict()`` joins the checkpoints,
restored on resume. The class lives in the data layer: it knows nothing of training.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DataModule"]


@dataclass(eq=False)
class DataModule:
    """A run's data: prepared once per machine, set up on every process, and its loaders.

    Subclass it; only ``train_loader`` is required (see the module doc for when each is
    called). A dataclass of no fields, so that a subclass written as a dataclass is a plain
    one, whose fields ``ember.cli`` fills from a config."""

    def prepare(self) -> None:
        """Once per machine, on its main process, before ``setup``: download, unpack, write
        to disk. Nothing done here is seen by the other processes but what it writes."""

    def setup(self) -> None:
        """On every process, after ``prepare``: read the data, build the datasets."""

    def train_loader(self) -> Any:
        """The train loader: an ember loader or a ``torch.utils.data.DataLoader`` (required)."""
        raise NotImplementedError(
            f"{type(self).__name__} has no train_loader(): a DataModule gives its train loader"
        )

    def valid_loader(self) -> Any:
        """The valid loader (or a mapping of named ones); override it for a run that
        validates."""
        return None

    def test_loader(self) -> Any:
        """A test loader, or None: ``with_test(name)`` without a loader evaluates it."""
        return None

    def predict_loader(self) -> Any:
        """The loader to predict over after training, or None."""
        return None
