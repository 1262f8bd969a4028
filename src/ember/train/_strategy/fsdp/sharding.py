"""How ``FullyShardedDataParallel`` shards a model: the device mesh and the wrapping policy.

The mesh comes from torchrun's environment: 1-D (every rank holds a shard of every parameter)
or, for hybrid sharding across nodes, 2-D ``("replicate", "shard")``: the ranks of one node
(``LOCAL_WORLD_SIZE``) shard the model between them and the nodes are replicas of each other,
so the large all-gathers and reduce-scatters stay inside a node and only an all-reduce of each
shard crosses nodes.

The wrapping policy says which submodules become their own FSDP unit (their parameters are
all-gathered just before their forward and freed after it): a module class, a tuple of them, or
a callable ``policy(name, module) -> bool``. The root module is always sharded last (it holds the
parameters no unit took). ``fully_shard`` runs bottom-up: children before their parents.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, TypeAlias, cast

import torch
from torch import nn

if TYPE_CHECKING:  # torch's FSDP costs most of a second to import: only a sharded run pays it
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

from ember.train._precision import Precision

__all__ = [
    "WrapPolicy",
    "check_policy",
    "device_mesh",
    "mixed_precision",
    "plan_units",
    "shard_model",
]

WrapPolicy: TypeAlias = (
    type[nn.Module] | tuple[type[nn.Module], ...] | Callable[[str, nn.Module], bool] | None
)
"""Which submodules ``FullyShardedDataParallel`` shards as units (None: only the root)."""

_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}


def check_policy(policy: object) -> WrapPolicy:
    """``policy`` if it is a module class, a non-empty tuple of them, a callable or None."""
    if (
        policy is None
        or _is_module_class(policy)
        or (isinstance(policy, tuple) and policy and all(map(_is_module_class, policy)))
        or (callable(policy) and not isinstance(policy, tuple))
    ):
        return cast(WrapPolicy, policy)  # a callable is called as policy(name, module)
    raise TypeError(
        "shard (the wrapping policy) must be an nn.Module subclass, a non-empty tuple of them, "
        f"a callable policy(name, module) -> bool or None, got {policy!r}"
    )


def _is_module_class(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, nn.Module)


def device_mesh(
    device: torch.device, world: int, *, hybrid: bool, timeout: timedelta
) -> DeviceMesh:
    """The run's mesh: ``("shard",)`` of ``world`` ranks (the default group), or with
    ``hybrid`` ``("replicate", "shard")`` of (nodes, ``LOCAL_WORLD_SIZE`` ranks per node),
    whose groups time out after ``timeout`` (torch's own default for a mesh's new groups is
    30 minutes)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    if not hybrid:
        return init_device_mesh(device.type, (world,), mesh_dim_names=("shard",))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if local < 1 or world % local:
        raise ValueError(
            f"hybrid sharding needs the same number of ranks on every node: the world size "
            f"{world} is not a multiple of LOCAL_WORLD_SIZE={local}"
        )
    backend = dist.get_backend()
    options = (
        dist.ProcessGroupNCCL.Options() if backend == "nccl" else dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]  # untyped in torch
    )
    options._timeout = timeout
    return init_device_mesh(
        device.type,
        (world // local, local),
        mesh_dim_names=("replicate", "shard"),
        backend_override={"replicate": (backend, options), "shard": (backend, options)},
    )


def mixed_precision(precision: Precision) -> MixedPrecisionPolicy:
    """FSDP's policy for ember's precision: compute in the mixed dtype (parameters all-gathered
    in it), reduce gradients and keep the sharded parameters in float32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = _DTYPES.get(precision)
    if dtype is None:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)


def plan_units(model: nn.Module, policy: WrapPolicy) -> list[str]:
    """The names of the submodules ``policy`` picks, top-down; ValueError when the model is
    sharded already or the policy picks no submodule (checked before any process joins)."""
    from torch.distributed.fsdp import FSDPModule

    already = [
        name or "the model" for name, m in model.named_modules() if isinstance(m, FSDPModule)
    ]
    if already:
        raise ValueError(
            f"fully_shard was applied already to {', '.join(already[:3])} of "
            f"{type(model).__name__}: pass FullyShardedDataParallel the plain model (it shards "
            "it), and a fresh one for every run"
        )
    units = [
        name for name, module in model.named_modules() if name and _picks(policy, name, module)
    ]
    if policy is not None and not units:
        kinds = sorted({type(m).__name__ for name, m in model.named_modules() if name})
        raise ValueError(
            f"the wrapping policy {policy!r} matches no submodule of {type(model).__name__} "
            f"(its submodules are {', '.join(kinds) or 'none'}): pick one of those classes, or "
            "shard=None to shard the model as one unit"
        )
    return units


def shard_model(
    model: nn.Module,
    units: list[str],
    mesh: DeviceMesh,
    *,
    reshard_after_forward: bool,
    precision: MixedPrecisionPolicy,
) -> None:
    """Apply ``fully_shard`` to the ``units`` (:func:`plan_units`), children first, then to
    ``model`` (it holds the parameters no unit took)."""
    from torch.distributed.fsdp import fully_shard

    modules = dict(model.named_modules())
    for name in reversed(units):  # named_modules is top-down: children are sharded first
        fully_shard(
            modules[name],
            mesh=mesh,
            reshard_after_forward=reshard_after_forward,
            mp_policy=precision,
        )
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=precision)


def _picks(policy: WrapPolicy, name: str, module: nn.Module) -> bool:
    if policy is None:
        return False
    if isinstance(policy, type | tuple):
        return isinstance(module, policy)
    return bool(policy(name, module))
