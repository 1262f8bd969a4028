"""What a training checkpoint holds: the run's state as a registry of named parts (exact resume).

Besides the model, the optimizer and the scheduler, ember saves what an exact resume needs and
Burn does not keep: the loop's counters, the RNG states of torch, numpy and Python (of every
process of the run), every loader's position and shuffle stream, the early-stopping state, the
user's own state and, inside a round, the round's metrics and log positions; the checkpointing
strategy's state is added by the checkpointer. A run resumed at a round end, or at the optimizer
step of a mid-round checkpoint, therefore ends with exactly the weights, optimizer state and
metric logs of a run that was never interrupted.

Each part writes its entry and reads it back with its own checks (``parts.py``); the registry,
:class:`RunState`, runs them (``registry.py``): a snapshot is a loop over the parts, a restore
the same loop backwards. Adding state to checkpoints is one part and one
:meth:`RunState.register`. The keys on disk::

    model-{e}, optim-{e}, scheduler-{e}.safetensors       "weights", "scheduler"
                                                          (a sharded run: its shard files)
    state-{e}.safetensors, its JSON metadata:
    {"format": "ember.training-state", "epoch": e,
     "step": k,                                           (a mid-round checkpoint: steps taken)
     "loop": {"optimizer_steps": steps taken so far, "train_passes": passes completed,
              "pass_items": items of the pass under way consumed, "lr": the last step's lr,
              "grad_scaler": <its state> (16-mixed)},                          "loop"
     "rng": <rank 0's RNG state>, "ranks_rng": [<rank 0's>, <rank 1's>, ...], "rng"
     "loaders": {"train": <state>, "valid": <state>, ...},                    "loaders"
     "early_stopping": <its state_dict()>,                                    "early_stopping"
     "round": {"iteration": train items logged in the round,                  "round"
               "round_passes": passes completed in the round,     (a mid-round checkpoint)
               "trained": whether the round's training is over,
               "metrics": {name: <each train metric's state_dict()>},   (tensors in the record)
               "logs": [{"logger": kind, "position": <its log_position()>}, ...]},
     "user": {name: <state_dict() of with_stateful(name, ...)>},               "user"
     "callbacks": {name: <a callback's state_dict()>},                        "callbacks"
     "data_module": {class name: <the data module's state_dict()>}}           "data_module"

A part marked ``everywhere`` takes part in every process's snapshot (gathering the ranks' RNG
states, writing a sharded model's shards); the others run on the main process, which alone
writes the records.
"""

from ember.train._state.parts import (
    CountersPart,
    EarlyStoppingPart,
    LoadersPart,
    RngPart,
    RoundPart,
    SchedulerPart,
    UserPart,
    WeightsPart,
)
from ember.train._state.registry import Resumed, RunState, Snapshot, StatePart

__all__ = [
    "CountersPart",
    "EarlyStoppingPart",
    "LoadersPart",
    "Resumed",
    "RngPart",
    "RoundPart",
    "RunState",
    "SchedulerPart",
    "Snapshot",
    "StatePart",
    "UserPart",
    "WeightsPart",
]
