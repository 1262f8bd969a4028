"""The debugging modes: ``fast_dev_run``, ``limit_batches``, ``overfit_batches``.

The builder records them in the configuration (so ``config.json`` says a run was one); at
launch :func:`debugging_run` turns them into the run they stand for:

* ``limit_batches(train=n, valid=m)``: each pass of a loader is its first n (m) batches
  (``LimitedLoader``: the batches of the wrapped pass, shuffled as it is; m of every
  validation set);
* ``overfit_batches(n)``: training and validation (every set) both read the items of the train
  loader's first n batches (a slice of its unshuffled items, shuffled within the slice as the loader
  shuffles), every round: a model that cannot overfit them has a bug;
* ``fast_dev_run(n=1)``: one round of n train and n valid batches, and nothing kept: no
  checkpoint, no metric file, no ``experiment.log``, no ``config.json``, no lock; the run
  directory is not touched (``LearningResult.directory`` is None). The given loggers are left
  out too, so a tracker records no run.

They run on one process: a data-parallel strategy refuses the limited loaders (naming it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ember.data import DataLoader
from ember.data._limited import LimitedLoader
from ember.train._config import TrainingConfig
from ember.train._schedule import EVERY_EPOCH

__all__ = ["debugging_run", "overfit_slice"]


def debugging_run(config: TrainingConfig) -> TrainingConfig:
    """``config`` as the run its debugging modes stand for (see the module doc); ``config``
    itself when it asks for none."""
    overfit = config.overfit_batches
    if overfit is not None:
        train = config.train_loader
        config = _with_valid(config, lambda _: overfit_slice(train, overfit))
        config = dataclasses.replace(config, train=overfit_slice(train, overfit))
    limits = config.limit_batches
    if config.fast_dev_run is not None:
        limits = (config.fast_dev_run, config.fast_dev_run)
    if limits is not None:
        train_limit, valid_limit = limits
        config = _with_valid(config, lambda valid: _limited(valid, valid_limit))
        config = dataclasses.replace(config, train=_limited(config.train_loader, train_limit))
    if config.fast_dev_run is None:
        return config
    return dataclasses.replace(
        config,
        num_epochs=1,
        epochs_given=True,
        max_steps=None,
        validate_every=EVERY_EPOCH,
        checkpoint_every=None,
        checkpointer=None,
        summary=False,
        loggers=(),
        file_logs=False,
        application_log=None,
        early_stopping=None,
        tests=(),
        resume=None,
        versioned=False,
        overwrite=False,
        max_time=None,
        keeps_files=False,
    )


def _with_valid(
    config: TrainingConfig, change: Callable[[DataLoader[Any]], DataLoader[Any]]
) -> TrainingConfig:
    """``config`` with every validation set's loader changed by ``change``."""
    if config.valid is None:
        return config
    sets = tuple((name, change(loader)) for name, loader in config.valid_sets)
    return dataclasses.replace(config, valid=change(config.valid), valid_sets=sets)


def _limited(loader: DataLoader[Any], batches: int | None) -> DataLoader[Any]:
    return loader if batches is None else LimitedLoader(loader, batches)


def overfit_slice(loader: DataLoader[Any], batches: int) -> DataLoader[Any]:
    """The items of ``loader``'s first ``batches`` batches of unshuffled data, as a loader of
    its own (``loader.slice``); ValueError naming the fix when its batch size is unknown."""
    batch_size = loader.state_dict().get("batch_size")
    items = loader.num_items()
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or items is None:
        raise ValueError(
            f"overfit_batches({batches}) takes the items of the train loader's first batches, "
            f"and {type(loader).__name__} does not say its batch size and length: build it "
            "with DataLoaderBuilder (or limit_batches(train=...) for the first batches of "
            "each pass)"
        )
    return loader.slice(0, min(items, batches * batch_size))
