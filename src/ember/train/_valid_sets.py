"""Several named validation sets: ``SupervisedTraining(directory, train, {"clean": a, ...})``.

The first set of the mapping is the run's main validation set: it is the run's valid loader
(``TrainingConfig.valid``) and its metrics keep their names (``Loss``), so whatever reads a valid
value by default (the default checkpointing strategy, early stopping, ``ReduceLROnPlateau``,
``result.values("valid", "Loss")``) reads it, exactly as in a run of one valid loader. Every
other set (``TrainingConfig.valid_sets``) is validated with its own copies of the registered
valid metrics, made by ``MetricsTraining.add_valid_set`` (``_metric/registered.py``), whose
values are named ``"{metric} ({set})"`` (``set_metric_name``, there), so they reach every reader
of metric values under that name with nothing of their own::

    the main set "clean"   placed under "valid"         Loss          valid/epoch-N/Loss.log
    the set "noisy"        placed under "valid:noisy"   Loss (noisy)  valid/epoch-N/Loss_(noisy).log

(the summary's ``Valid | Loss (noisy)`` row, ``summary.json``, ``ember.runs``, ``ember
compare``, ``ember plot``, the trackers' ``valid/Loss (noisy)``; early stopping and a
checkpointing strategy watch a set by naming its value, ``"Loss (noisy)"``). A set's loader is
placed by its key (:func:`loader_key`), so checkpoints keep its position and a data-parallel
strategy gives each rank its share. The loop validates the sets in order inside one valid split
of a round (``_loop.py``), each item tagged with its set (``ProcessedItem.valid_set``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from ember.data import DataLoader
from ember.data._torch_loader import as_ember_loader
from ember.train._metric.base import Metric
from ember.train._metric.registered import set_metric_name
from ember.train._vocabulary import Split

__all__ = [
    "ValidSets",
    "loader_key",
    "logged_names",
    "set_metrics",
    "valid_loaders",
]

ValidSets = tuple[tuple[str, DataLoader[Any]], ...]
"""The validation sets after the main one, in the order given, by name."""

_NAME = re.compile(r"[A-Za-z0-9_.\-]+")
"""A set's name: it goes into metric names, file names and tracker tags."""


def valid_loaders(valid: Any) -> tuple[DataLoader[Any] | None, str | None, ValidSets]:
    """The builder's ``valid`` as the main loader, its name (None for a loader given alone)
    and the other sets: a loader (ember's or torch's), a mapping ``{name: loader}`` (at least
    one), or None (the run trains only). TypeError or ValueError naming the bad name or loader."""
    if valid is None:
        return None, None, ()
    if not isinstance(valid, Mapping):
        return as_ember_loader(valid, "the valid loader"), None, ()
    if not valid:
        raise ValueError(
            "valid is an empty mapping: give {name: loader} with at least one validation set, "
            "or leave valid out (None) to train only"
        )
    sets = tuple((_checked_name(name), valid[name]) for name in valid)
    loaders = tuple(
        (name, as_ember_loader(loader, f"the valid loader {name!r}")) for name, loader in sets
    )
    (main_name, main), *others = loaders
    return main, main_name, tuple(others)


def _checked_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(
            f"a validation set's name must be a str, got {name!r} ({type(name).__name__}): "
            'give valid={"clean": loader, ...}'
        )
    if _NAME.fullmatch(name) is None:
        raise ValueError(
            f"the validation set name {name!r} is not one ember can use: give a non-empty name "
            "of letters, digits, '_', '-' and '.' (it names the set's metric values, e.g. "
            "'Loss (noisy)', their log files and tracker tags)"
        )
    return name


def loader_key(set_name: str | None) -> str:
    """The key a validation set's loader is placed and checkpointed under: ``valid`` for the
    main set (None), ``valid:{name}`` for another."""
    return "valid" if set_name is None else f"valid:{set_name}"


def set_metrics(
    metrics: Iterable[tuple[Split, Metric]], sets: Iterable[tuple[str, Any]]
) -> list[tuple[str, Metric]]:
    """Every other set's copy of each registered valid metric, as the name its values are
    logged under and the registered metric: ``[("Loss (noisy)", LossMetric()), ...]``, set
    after set."""
    valid = [metric for split, metric in metrics if split is Split.VALID]
    return [(set_metric_name(metric.name, name), metric) for name, _ in sets for metric in valid]


def logged_names(
    metrics: Iterable[tuple[Split, Metric]], sets: Iterable[tuple[str, Any]], split: Split
) -> list[str]:
    """The names ``split``'s values are logged under: its registered metrics', then (the valid
    split) every other set's (:func:`set_metrics`)."""
    metrics = list(metrics)
    names = [metric.name for s, metric in metrics if s is split]
    if split is Split.VALID:
        names += [name for name, _ in set_metrics(metrics, sets)]
    return names
