"""What each "node" of the multi-node test runs under torchrun (``python -m`` this module).

``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:PORT``
starts one process per node; the strategy initialises the process group from torchrun's
variables (no ``spawn``), trains the run every DDP test compares, and each rank saves its
weights.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch.distributed as dist

from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.strategy.ddp import helpers as ddp_helpers


def main(out_dir: str) -> None:
    out = Path(out_dir)
    strategy = DistributedDataParallel("gloo")
    builder, learner = ddp_helpers.training(out / f"run-{strategy.rank}", 2, strategy)
    result = builder.launch(learner)
    if result.error is not None:
        raise SystemExit(result.traceback)
    ddp_helpers.save_weights(out / f"node-rank{dist.get_rank()}.safetensors", result.model)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
