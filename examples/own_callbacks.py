"""Two callbacks of the catalogue written again as a user would, on the public extension point.

``MovingAverage`` is ``EMA(decay)`` (torch's ``AveragedModel`` updated after every optimizer
step, its state in every checkpoint) and ``TimeBudget`` is ``max_time(seconds)`` (the run stops
after the step past a wall-clock budget), each in a few lines: a team's own callbacks need no
edit of ember's loop. ``tests/test_own_callbacks_example.py`` holds them to the catalogue's.

    python examples/own_callbacks.py
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from ember.data import DataLoaderBuilder, InMemDataset
from ember.train import Callback, Learner, LossMetric, RunView, SupervisedTraining


class MovingAverage(Callback):
    """An exponential moving average of the weights, kept in every checkpoint."""

    def __init__(self, decay: float) -> None:
        self.decay, self.averaged, self.saved = decay, None, None

    def on_run_start(self, run: RunView) -> None:
        ema = get_ema_multi_avg_fn(self.decay)
        self.averaged = AveragedModel(run.model, multi_avg_fn=ema, use_buffers=True)
        if self.saved is not None:  # a resumed run: the checkpoint's average
            self.averaged.load_state_dict(self.saved)

    def on_after_optimizer_step(self, step: RunView) -> None:
        self.averaged.update_parameters(step.model)

    def state_dict(self) -> dict[str, Any]:
        return {"averaged": self.averaged.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.saved = state["averaged"]


class TimeBudget(Callback):
    """Stop after the optimizer step past ``seconds`` of training."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_run_start(self, run: RunView) -> None:
        self.deadline = time.monotonic() + self.seconds

    def on_after_optimizer_step(self, step: RunView) -> None:
        if time.monotonic() >= self.deadline:
            step.stop(f"the time budget of {self.seconds}s ran out")


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4, generator=generator)
    data = list(zip(x, x.sum(dim=1, keepdim=True), strict=True))
    train = DataLoaderBuilder().batch_size(16).shuffle(0).build(InMemDataset(data))
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))
    average, budget = MovingAverage(0.99), TimeBudget(2.0)
    training = SupervisedTraining("artifacts/own-callbacks", train).metrics(LossMetric())
    training = training.num_epochs(10_000).with_callbacks(average, budget)
    learner = Learner(model, torch.optim.Adam(model.parameters()), loss=nn.MSELoss())
    result = training.launch(learner)
    print(result.stop_reason)


if __name__ == "__main__":
    main()
