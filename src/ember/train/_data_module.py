"""A run's data module at launch: prepared once per machine, set up on every process, its
loaders taken into the configuration (``ember.data.DataModule``).

::

    with_data(config):
        the strategy joins its processes (a data-parallel job's process group)
        prepare()        on the main process of each machine (local rank 0); the others wait
        setup()          on every process
        train_loader(), valid_loader() (a run that validates)  ->  config.train, config.valid
        test_loader() (with_test(name) without a loader)       ->  config.tests

The training layer never imports a data module's code: it calls the methods of the object the
builder was given.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from ember._protocols import member
from ember.data import DataLoader, DataModule
from ember.data._torch_loader import as_ember_loader
from ember.train._config import TrainingConfig, defines_valid
from ember.train._evaluation.evaluator import check_tests
from ember.train._strategy.base import StrategyDefaults
from ember.train._valid_sets import valid_loaders

__all__ = ["with_data"]


def with_data(config: TrainingConfig) -> TrainingConfig:
    """``config`` with its data module's loaders (see the module doc); ``config`` itself when
    it was given loaders."""
    module = config.data_module
    if module is None:
        return config
    _prepare(module, config)
    module.setup()
    name = type(module).__name__
    train = _loader(module.train_loader(), f"{name}.train_loader()")
    if config.module_test is not None:  # with_test(name): the module's test loader
        test = _loader(module.test_loader(), f"{name}.test_loader()")
        tests = check_tests([*config.tests, (config.module_test, test)])
        config = dataclasses.replace(config, tests=tuple(tests))
    if not defines_valid(module):
        return dataclasses.replace(config, train=train)
    given = module.valid_loader()
    if given is None:
        _loader(given, f"{name}.valid_loader()")  # refused, naming the fix
    valid, valid_name, valid_sets = valid_loaders(given)
    return dataclasses.replace(
        config, train=train, valid=valid, valid_name=valid_name, valid_sets=valid_sets
    )


def _prepare(module: DataModule, config: TrainingConfig) -> None:
    """``module.prepare()`` on the main process of this machine; every process of the job
    waits for it (a barrier), so that ``setup`` finds what it wrote."""
    import torch.distributed as dist

    if config.strategy is not None:
        member(config.strategy, StrategyDefaults, "join")()
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        module.prepare()  # an error here ends this process, and the launcher the job
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _loader(value: Any, who: str) -> DataLoader[Any]:
    if value is None:
        raise ValueError(
            f"{who} returned None: return a loader (DataLoaderBuilder(...).build(dataset) or a "
            "torch DataLoader), or do not override valid_loader for a run that trains only"
        )
    return as_ember_loader(value, who)
