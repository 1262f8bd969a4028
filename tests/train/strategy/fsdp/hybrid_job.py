"""One "node" of the hybrid-FSDP job the tests start with torchrun (2 nodes on this machine).

Run as ``python -m tests.train.strategy.fsdp.hybrid_job OUT`` under ``torchrun --nnodes 2``:
trains the FSDP tests' run with ``FullyShardedDataParallel(hybrid=True)`` (a 2-D mesh: the
ranks of a node shard the model, the nodes replicate it) and rank 0 writes its weights and
the mesh of a parameter (``mesh.json``).
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from ember.train import FullyShardedDataParallel
from tests.train.strategy.fsdp import helpers


def main(out: Path) -> None:
    strategy = FullyShardedDataParallel(shard=nn.Linear, hybrid=True, timeout=timedelta(seconds=30))
    model = helpers.run(*helpers.training(out / "run", 1, strategy), out, "hybrid")
    weight = model.get_parameter("net.0.weight")
    assert isinstance(weight, DTensor)  # sharded over the run's mesh
    names = weight.device_mesh.mesh_dim_names or ()
    groups = [weight.device_mesh.get_group(name) for name in names]
    if dist.get_rank() == 0:
        mesh = {
            "names": list(names),
            "shape": list(weight.device_mesh.shape),
            "placements": [str(p) for p in weight.placements],
            "timeouts": [
                group._get_backend(torch.device("cpu")).options._timeout.total_seconds()
                for group in groups
            ],
        }
        (out / "mesh.json").write_text(json.dumps(mesh), encoding="utf-8")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
