"""No optimizer: the model's own ``optimize`` updates its parameters (examples/regression), as
the original's hand-written update does; refused, with the fix, where it cannot work."""

from __future__ import annotations

import importlib
import io
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from ember.train import CliMetricsRenderer, Learner, SupervisedTraining
from tests.train.fixtures import TinyRegressor, loader, read_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def regression(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    return importlib.import_module("regression")


def test_the_models_optimize_updates_as_the_raw_loop_does(
    regression: ModuleType, tmp_path: Path
) -> None:
    """Learner(model, None, 0.1, loss=F.smooth_l1_loss): optimize gets lr 0.1 and no
    optimizer; an epoch's losses and the weights are the raw loop's, bit for bit."""
    result = regression.main(["--epochs", "1", "--threshold", "-1", "--dir", str(tmp_path)])
    assert result.error is None, result.traceback
    assert result.stop_reason is None
    torch.manual_seed(0)
    raw = regression.Polynomial()
    losses = []
    for x, y in regression.loader():
        raw.zero_grad()
        loss = F.smooth_l1_loss(raw(x), y)
        torch.autograd.backward(loss)
        with torch.no_grad():
            for param in raw.parameters():
                param.add_(-0.1 * param.grad)
        losses.append(f"{loss.item()!r},{len(y)}")
    assert read_lines(tmp_path / "train" / "epoch-1" / "Loss.log")[:-1] == losses
    for ours, theirs in zip(result.model.parameters(), raw.parameters(), strict=True):
        assert torch.equal(ours, theirs)


def test_no_optimizer_is_refused_where_nothing_would_update(tmp_path: Path) -> None:
    """A model without its own optimize, a torch scheduler (it drives an optimizer's lrs) and
    a gradient scaler (it unscales an optimizer's gradients): each refused, naming the fix."""
    with pytest.raises(TypeError, match=r"has no optimizer.*pass one, e.g. Learner\(model"):
        Learner(TinyRegressor())

    class Own(TinyRegressor):
        def optimize(self, optim: object, lr: object, grads: object) -> None:
            pass

    own = Own()
    plain = torch.optim.SGD(TinyRegressor().parameters(), lr=0.1)
    with pytest.raises(TypeError, match="a torch lr scheduler drives an optimizer's lrs"):
        Learner(own, None, torch.optim.lr_scheduler.StepLR(plain, 1))
    training = (
        SupervisedTraining(tmp_path, loader(8), loader(4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .precision("16-mixed")
    )
    with pytest.raises(ValueError, match=r"16-mixed'\) unscales the gradients of an optimizer"):
        training.launch(Learner(own))
    assert Learner(own).lr_step() is None
    assert Learner(own, None, 0.5).lr_step() == 0.5
