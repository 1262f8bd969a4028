"""Learner: what it accepts as model and optimizer."""

from __future__ import annotations

import pytest
import torch

from ember.train import Learner
from tests.train.fixtures import TinyRegressor


def test_learner_rejects_bad_model_and_optimizer(model: TinyRegressor) -> None:
    """A model with only one of the two steps, or an optim that is no optimizer, raises
    TypeError."""

    class Half(torch.nn.Linear):
        def inference_step(self, batch: object) -> object:
            return batch

    with pytest.raises(TypeError, match=r"has no train_step\(batch\) method: implement it too"):
        Learner(Half(2, 2), torch.optim.SGD(model.parameters()), 0.1)
    with pytest.raises(TypeError, match=r"optim must be a torch\.optim\.Optimizer"):
        Learner(model, "adam", 0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bool"):
        Learner(model, torch.optim.SGD(model.parameters()), True)
