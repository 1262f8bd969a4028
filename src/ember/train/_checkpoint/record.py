"""Records: what a checkpoint file holds — named CPU tensors plus a JSON document.

A :class:`Record` is a snapshot: the functions here clone every tensor to CPU before they return,
so training may change the weights at once. Structures that are not plain JSON (the optimizer's
``state_dict`` has int keys, tuples and tensors) are stored with a small codec: tensors move to
:attr:`Record.tensors` under their dotted path (``state.0.exp_avg``) and leave a marker behind::

    {"$tensor": "state.0.exp_avg"}        a tensor, stored under that key
    {"$tuple": [...]}                      a tuple
    {"$dict": [[key, value], ...]}         a dict whose keys are not all plain strings

Everything else is JSON as is. Decoding gives back equal values of the same types.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ember._errors import CheckpointError

__all__ = [
    "TRANSFORMERS_CONFIG",
    "TRANSFORMERS_GENERATION_CONFIG",
    "Record",
    "load_model_record",
    "load_nested_record",
    "load_optimizer_record",
    "load_optimizers_record",
    "model_record",
    "nested_record",
    "optimizer_record",
    "optimizers_record",
    "plain_state_name",
    "state_record",
    "transformers_config",
    "transformers_metadata",
]

_TENSOR, _TUPLE, _DICT = "$tensor", "$tuple", "$dict"
_EXTRA = "$extra."  # key prefix of tensors inside a module's extra state (no parameter name has it)

TRANSFORMERS_CONFIG = "transformers_config"
"""The model record's metadata key of a ``transformers`` model's configuration (its
``config.json``), from which ``export_pretrained`` writes a directory ``from_pretrained`` loads."""

TRANSFORMERS_GENERATION_CONFIG = "transformers_generation_config"
"""The model record's metadata key of a generative ``transformers`` model's ``generation_config``
(its ``generation_config.json``), as the model held it when saved: settings a user gave it
(``max_new_tokens``, ``pad_token_id``) are not in ``config.json``, so only the record keeps them."""


@dataclass(frozen=True, slots=True, eq=False)
class Record:
    """Named tensors and a JSON-able ``metadata`` dict: the content of one checkpoint file."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, tensor in self.tensors.items():
            if not isinstance(key, str) or not isinstance(tensor, torch.Tensor):
                raise TypeError(f"Record tensors must map str to Tensor, got {key!r}: {tensor!r}")
        if not isinstance(self.metadata, dict):
            raise TypeError(f"Record metadata must be a dict, got {type(self.metadata).__name__}")


def snapshot(tensor: torch.Tensor) -> torch.Tensor:
    """A detached, contiguous CPU copy of ``tensor`` that shares no memory with it."""
    return tensor.detach().to(device="cpu", memory_format=torch.contiguous_format, copy=True)


# --- pure JSON -----------------------------------------------------------------------------------


def state_record(state: Mapping[str, Any]) -> Record:
    """A tensor-free record of ``state``, which must be plain JSON (dict with str keys, list, str,
    int, float, bool, None). The metadata is a deep copy; tuples or other types raise TypeError
    naming their path, so what is restored always equals what was saved."""
    return Record(metadata=_json_copy(dict(state), "state"))


def nested_record(value: Any) -> Record:
    """A snapshot of any nesting of dict, list, tuple, str, int, float, bool, None and tensors
    (a torch LR scheduler's or a loader's ``state_dict``); :func:`load_nested_record` gives back
    an equal value of the same types. Other types raise TypeError naming their path."""
    tensors: dict[str, torch.Tensor] = {}
    return Record(tensors=tensors, metadata={"value": encode(value, "value", tensors)})


def load_nested_record(record: Record) -> Any:
    """The value stored by :func:`nested_record`."""
    if "value" not in record.metadata:
        raise CheckpointError("the record was not made by nested_record: it has no 'value'")
    return decode(record.metadata["value"], record.tensors, "nested record")


def _json_copy(value: Any, path: str) -> Any:
    if value is None:
        return None
    for kind in (bool, str, int, float):  # bool first: it is an int; subclasses become the base
        if isinstance(value, kind):
            return kind(value)
    if isinstance(value, list):
        return [_json_copy(item, f"{path}.{i}") for i, item in enumerate(value)]
    if isinstance(value, dict):
        copy: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"state key {key!r} at {path!r} is not a str (JSON keys are)")
            copy[key] = _json_copy(item, f"{path}.{key}")
        return copy
    raise TypeError(
        f"state value at {path!r} has type {type(value).__name__}, which is not JSON "
        "(use dict, list, str, int, float, bool or None)"
    )


# --- codec for structures with tensors ------------------------------------------------------------


def encode(value: Any, path: str, tensors: dict[str, torch.Tensor]) -> Any:
    """JSON for ``value``; its tensors are snapshotted into ``tensors`` under dotted paths."""
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, torch.Tensor):
        key, count = path, 0
        while key in tensors:  # {1: t, "1": u} has two tensors at the path "1"
            count += 1
            key = f"{path}#{count}"
        tensors[key] = snapshot(value)
        return {_TENSOR: key}
    if isinstance(value, tuple):
        return {_TUPLE: [encode(item, _join(path, i), tensors) for i, item in enumerate(value)]}
    if isinstance(value, list):
        return [encode(item, _join(path, i), tensors) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        if all(isinstance(key, str) and not key.startswith("$") for key in value):
            return {key: encode(item, _join(path, key), tensors) for key, item in value.items()}
        return {
            _DICT: [
                [
                    encode(key, f"{_join(path, key)}.$key", {}),
                    encode(item, _join(path, key), tensors),
                ]
                for key, item in value.items()
            ]
        }
    raise TypeError(
        f"value at {path!r} has type {type(value).__name__}, which a checkpoint cannot store"
    )


def decode(value: Any, tensors: Mapping[str, torch.Tensor], where: str) -> Any:
    """The inverse of :func:`encode`; CheckpointError naming ``where`` on a malformed document
    (also one nested too deeply to decode)."""
    try:
        return _decode(value, tensors, where)
    except RecursionError:
        raise CheckpointError(f"{where} is malformed: it is nested too deeply") from None


def _decode(value: Any, tensors: Mapping[str, torch.Tensor], where: str) -> Any:
    if isinstance(value, list):
        return [_decode(item, tensors, where) for item in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1 and _TENSOR in value:
        key = value[_TENSOR]
        if not isinstance(key, str) or key not in tensors:
            raise CheckpointError(f"{where} refers to a tensor {key!r} it does not contain")
        return tensors[key]
    if len(value) == 1 and _TUPLE in value and isinstance(value[_TUPLE], list):
        return tuple(_decode(item, tensors, where) for item in value[_TUPLE])
    if len(value) == 1 and _DICT in value and isinstance(value[_DICT], list):
        result: dict[Any, Any] = {}
        for pair in value[_DICT]:
            if not isinstance(pair, list) or len(pair) != 2:
                raise CheckpointError(f"{where} has a malformed {_DICT} entry: {pair!r}")
            key = _decode(pair[0], {}, where)
            try:
                result[key] = _decode(pair[1], tensors, where)
            except TypeError as error:  # an unhashable key
                raise CheckpointError(f"{where} has a malformed key {pair[0]!r}") from error
        return result
    return {key: _decode(item, tensors, where) for key, item in value.items()}


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


# --- model ----------------------------------------------------------------------------------------


def plain_state_name(name: str) -> str:
    """``name`` without the ``_orig_mod`` parts a ``torch.compile``'d submodule adds, so that a
    checkpoint of a compiled model loads into an uncompiled one and back."""
    if "_orig_mod" not in name:
        return name
    return ".".join(part for part in name.split(".") if part != "_orig_mod")


def model_record(model: nn.Module) -> Record:
    """A snapshot of ``model.state_dict()``: tensors under their names (see
    :func:`plain_state_name`), cloned to CPU.

    Non-tensor entries (a module's ``get_extra_state``) go to ``metadata["extra_state"]``; a
    ``transformers`` model's configurations to the metadata (:func:`transformers_metadata`).
    """
    tensors: dict[str, torch.Tensor] = {}
    extra: dict[str, Any] = {}
    for key, value in model.state_dict().items():
        name = plain_state_name(key)
        if isinstance(value, torch.Tensor):
            tensors[name] = snapshot(value)
        else:
            extra[name] = encode(value, f"{_EXTRA}{name}", tensors)
    metadata: dict[str, Any] = {"extra_state": extra} if extra else {}
    return Record(tensors=tensors, metadata=metadata | transformers_metadata(model))


def transformers_metadata(model: nn.Module) -> dict[str, Any]:
    """What a ``transformers`` model's records keep for an export: its configuration under
    :data:`TRANSFORMERS_CONFIG` and, for a model that generates, its generation configuration
    under :data:`TRANSFORMERS_GENERATION_CONFIG`, as ``save_pretrained`` writes it (the values
    that differ from ``GenerationConfig()``'s); empty for any other model."""
    config = transformers_config(model)
    if config is None:
        return {}
    # None on a model that cannot generate (transformers sets it only on those that can)
    generation = getattr(model, "generation_config", None)
    if not callable(getattr(generation, "to_json_string", None)):
        return {TRANSFORMERS_CONFIG: config}
    content: dict[str, Any] = json.loads(generation.to_json_string(use_diff=True))  # type: ignore[union-attr]
    content.pop("compile_config", None)  # a run-time setting save_pretrained leaves out too
    return {TRANSFORMERS_CONFIG: config, TRANSFORMERS_GENERATION_CONFIG: content}


def transformers_config(model: nn.Module) -> dict[str, Any] | None:
    """A ``transformers`` model's ``config.json`` content, as ``save_pretrained`` writes it
    (its class in ``architectures``); None for any other model. Duck-typed: nothing of
    ``transformers`` is imported here."""
    config = getattr(model, "config", None)
    if not callable(getattr(model, "save_pretrained", None)) or not callable(
        getattr(config, "to_json_string", None)
    ):
        return None
    content: dict[str, Any] = json.loads(config.to_json_string(use_diff=False))  # type: ignore[union-attr]
    # the model's transformers class: FSDP's fully_shard makes each sharded model an instance
    # of a subclass of its own (FSDPGPT2LMHeadModel), which from_pretrained does not know
    kinds = type(model).__mro__
    kind = next((k for k in kinds if k.__module__.startswith("transformers.")), kinds[0])
    content["architectures"] = [kind.__name__]
    return content


def load_model_record(model: nn.Module, record: Record) -> None:
    """Copy ``record`` into ``model``'s tensors (on their devices), strictly.

    Missing or unexpected names, or a shape or dtype that differs, raise CheckpointError naming
    the parameter and both values; nothing is copied then.
    """
    own = model.state_dict()
    names = {plain_state_name(name): name for name in own}
    expected = {plain: own[name] for plain, name in names.items()}
    extra_json = record.metadata.get("extra_state", {})
    if not isinstance(extra_json, dict):
        raise CheckpointError("model record has a malformed 'extra_state'")
    extra = {
        name: decode(value, record.tensors, "model record") for name, value in extra_json.items()
    }
    stored = {
        name: tensor for name, tensor in record.tensors.items() if not name.startswith(_EXTRA)
    } | extra
    missing = [name for name in expected if name not in stored]
    unexpected = [name for name in stored if name not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"model checkpoint does not fit the model: missing {missing}, unexpected {unexpected}"
        )
    for name, target in expected.items():
        source = stored[name]
        if isinstance(target, torch.Tensor):
            if not isinstance(source, torch.Tensor):
                raise CheckpointError(f"model checkpoint holds no tensor for {name!r}")
            if source.shape != target.shape or source.dtype != target.dtype:
                raise CheckpointError(
                    f"model parameter {name!r} does not fit: checkpoint has shape "
                    f"{tuple(source.shape)} {source.dtype}, model has shape "
                    f"{tuple(target.shape)} {target.dtype}"
                )
    with torch.no_grad():
        model.load_state_dict({names[name]: value for name, value in stored.items()}, strict=True)


# --- optimizer ------------------------------------------------------------------------------------


def optimizer_record(optim: torch.optim.Optimizer) -> Record:
    """A snapshot of ``optim.state_dict()``.

    Per-parameter state tensors (also 0-dim ones such as Adam's ``step``) are stored under
    ``state.{param_index}.{name}``; the rest — scalars, ``param_groups`` — is JSON in
    ``metadata["state_dict"]``. ``metadata["param_shapes"]`` records each parameter's shape so a
    checkpoint for another model is refused on load.
    """
    tensors: dict[str, torch.Tensor] = {}
    encoded = encode(optim.state_dict(), "", tensors)
    shapes = [list(p.shape) for group in optim.param_groups for p in group["params"]]
    return Record(tensors=tensors, metadata={"state_dict": encoded, "param_shapes": shapes})


def load_optimizer_record(optim: torch.optim.Optimizer, record: Record) -> None:
    """Load ``record`` into ``optim`` (torch moves the state to each parameter's device).

    A different number of parameter groups, of parameters in a group, or a parameter shape that
    differs raises CheckpointError with the details.
    """
    if "state_dict" not in record.metadata:
        raise CheckpointError("optimizer record has no 'state_dict'")
    state_dict = decode(record.metadata["state_dict"], record.tensors, "optimizer record")
    if not isinstance(state_dict, dict) or not isinstance(state_dict.get("param_groups"), list):
        raise CheckpointError("optimizer record has a malformed 'state_dict'")
    saved_groups = state_dict["param_groups"]
    groups = optim.param_groups
    if len(saved_groups) != len(groups):
        raise CheckpointError(
            f"optimizer checkpoint has {len(saved_groups)} parameter groups, "
            f"the optimizer has {len(groups)}"
        )
    for index, (saved, group) in enumerate(zip(saved_groups, groups, strict=True)):
        count = len(saved.get("params", [])) if isinstance(saved, dict) else -1
        if count != len(group["params"]):
            raise CheckpointError(
                f"optimizer checkpoint has {count} parameters in group {index}, "
                f"the optimizer has {len(group['params'])}"
            )
    _check_param_shapes(optim, record.metadata.get("param_shapes"))
    try:
        optim.load_state_dict(state_dict)
    except (ValueError, KeyError, TypeError, RuntimeError) as error:
        raise CheckpointError(
            f"optimizer checkpoint does not fit the optimizer: {error}"
        ) from error


def optimizers_record(optims: Mapping[str, torch.optim.Optimizer]) -> Record:
    """One record of several optimizers: each one's :func:`optimizer_record` under its name."""
    tensors: dict[str, torch.Tensor] = {}
    metadata: dict[str, Any] = {}
    for name, optim in optims.items():
        record = optimizer_record(optim)
        tensors.update({f"{name}/{key}": tensor for key, tensor in record.tensors.items()})
        metadata[name] = record.metadata
    return Record(tensors=tensors, metadata={"optimizers": metadata})


def load_optimizers_record(optims: Mapping[str, torch.optim.Optimizer], record: Record) -> None:
    """Load a record of :func:`optimizers_record` into the optimizers of the same names."""
    saved = record.metadata.get("optimizers")
    if not isinstance(saved, dict) or sorted(saved) != sorted(optims):
        found = sorted(saved) if isinstance(saved, dict) else None
        raise CheckpointError(
            f"the optimizer checkpoint holds the optimizers {found}, the Learner has "
            f"{sorted(optims)}"
        )
    for name, optim in optims.items():
        prefix = f"{name}/"
        tensors = {
            key[len(prefix) :]: tensor
            for key, tensor in record.tensors.items()
            if key.startswith(prefix)
        }
        load_optimizer_record(optim, Record(tensors=tensors, metadata=saved[name]))


def _check_param_shapes(optim: torch.optim.Optimizer, shapes: object) -> None:
    if not isinstance(shapes, list):
        raise CheckpointError("optimizer record has no 'param_shapes'")
    index = 0
    for group_index, group in enumerate(optim.param_groups):
        for position, param in enumerate(group["params"]):
            saved = shapes[index] if index < len(shapes) else None
            if saved != list(param.shape):
                raise CheckpointError(
                    f"optimizer parameter {index} (group {group_index}, position {position}) does "
                    f"not fit: checkpoint has shape {_shape(saved)}, model has shape "
                    f"{tuple(param.shape)}"
                )
            index += 1


def _shape(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value
