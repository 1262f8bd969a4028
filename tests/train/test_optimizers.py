"""Several optimizers, through the example that ports pytorch/examples' dcgan (closures:
test_closures.py)."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch
from safetensors.torch import load_file

from ember.train import Learner, SupervisedTraining
from tests.train.fixtures import TinyRegressor

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch) -> dict[str, ModuleType]:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    return {"dcgan": importlib.import_module("dcgan")}


def test_two_optimizers_train_checkpoint_and_resume_exactly(
    examples: dict[str, ModuleType], tmp_path: Path
) -> None:
    """dcgan: both optimizers step (each model half changes), the model's optimize sees the
    step context (samples every N steps), both optimizers are checkpointed, and a resume ends
    exactly as an uninterrupted run."""
    dcgan = examples["dcgan"]
    straight = dcgan.main(["--epochs", "3", "--sample-every", "10", "--dir", str(tmp_path / "a")])
    assert straight.error is None, straight.traceback
    assert len(straight.model.samples) == 5  # 48 optimizer steps: 0, 10, ..., 40
    optim = load_file(tmp_path / "a" / "checkpoint" / "optim-3.safetensors")
    assert any(k.startswith("generator/") for k in optim)
    assert any(k.startswith("discriminator/") for k in optim)
    dcgan.main(["--epochs", "2", "--sample-every", "10", "--dir", str(tmp_path / "b")])
    torch.manual_seed(0)
    model = dcgan.Gan(sample_every=10)
    optimizers = {
        "generator": torch.optim.Adam(model.generator.parameters(), lr=2e-3, betas=(0.5, 0.999)),
        "discriminator": torch.optim.Adam(
            model.discriminator.parameters(), lr=1e-3, betas=(0.5, 0.999)
        ),
    }
    resumed = (
        SupervisedTraining(tmp_path / "b", dcgan.loader(1024, 1), dcgan.loader(256, 2))
        .metrics(dcgan.LossMetric())
        .num_epochs(3)
        .with_default_checkpointers()
        .checkpoint(2)
        .launch(Learner(model, optimizers))
    )
    assert resumed.error is None, resumed.traceback
    for a, b in zip(straight.model.state_dict().values(), model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_the_default_optimize_is_refused_where_it_cannot_work() -> None:
    """Several optimizers, or none, with LearnerModel's default optimize: a TypeError naming
    the pattern; a scheduler with several optimizers too."""
    model = TinyRegressor()
    with pytest.raises(TypeError, match=r"trains 2 optimizers \(a, b\): override optimize"):
        Learner(
            model,
            {"a": torch.optim.SGD(model.parameters()), "b": torch.optim.SGD(model.parameters())},
        )
    with pytest.raises(TypeError, match=r"has no optimizer, and TinyRegressor has no optimize"):
        Learner(model)

    class Own(TinyRegressor):
        def optimize(self, optim: object, lr: float, grads: object) -> None:
            pass

    own = Own()
    with pytest.raises(TypeError, match="pass no lr_scheduler"):
        Learner(own, {"a": torch.optim.SGD(own.parameters(), lr=0.1)}, 0.1)
