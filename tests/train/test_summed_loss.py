"""A loss summed over its batch, logged per sample: ``summed_over`` of an output (the VAE of
examples/vae), equal to the original's per-image averages to the last bit."""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ember.extend import LossInput
from ember.train import LossMetric, LossOutput, RegressionOutput
from ember.train._metric.base import MetricMetadata
from ember.train._strategy.ddp.outputs import _GlobalBatch
from tests.train.fixtures import read_lines

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
META = MetricMetadata(None, 1, None)  # type: ignore[arg-type]  # the loss reads no progress


@pytest.fixture
def vae(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    pytest.importorskip("sklearn")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    return importlib.import_module("vae")


def test_the_vae_logs_the_originals_per_image_losses_bit_for_bit(
    vae: ModuleType, tmp_path: Path
) -> None:
    """Per batch loss / images, per epoch the summed loss over the epoch's images (train and
    test), the weights of the original's loop, and each epoch's first validation batch kept by
    inference_step through the step context."""
    result = vae.main(["--epochs", "2", "--dir", str(tmp_path)])
    assert result.error is None, result.traceback
    torch.manual_seed(0)
    raw = vae.Vae()
    optim = torch.optim.Adam(raw.parameters(), lr=1e-3)
    train, valid = vae.loaders()
    for epoch in (1, 2):
        raw.train()
        total, lines = 0.0, []
        for x in train:
            optim.zero_grad()
            loss, _ = raw.loss(x)
            loss.backward()
            total += loss.item()
            lines.append(f"{loss.item() / len(x)!r},{len(x)}")
            optim.step()
        logged = read_lines(tmp_path / "train" / f"epoch-{epoch}" / "Loss.log")
        assert logged == [*lines, f"{total / 1500!r},final"]
        raw.eval()
        test = 0.0
        with torch.no_grad():
            for i, x in enumerate(valid):
                loss, recon = raw.loss(x)
                test += loss.item()
                if i == 0:
                    first = torch.cat([x[:8], recon[:8]]).view(-1, 8, 8)
        logged = read_lines(tmp_path / "valid" / f"epoch-{epoch}" / "Loss.log")
        assert logged[-1] == f"{test / 297!r},final"
        assert torch.equal(result.model.reconstructions[epoch], first)
    for ours, theirs in zip(
        result.model.state_dict().values(), raw.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs)


@given(st.lists(st.tuples(st.floats(0, 1e4), st.integers(1, 64)), min_size=1, max_size=8))
def test_the_epoch_value_is_the_sum_over_the_samples(batches: list[tuple[float, int]]) -> None:
    """Whatever the sums and sizes: each batch logs sum / n weighted by n, and the epoch value
    is the sums' total over the samples' total, computed as a raw loop computes it."""
    metric = LossMetric()
    total = 0.0
    for value, count in batches:
        loss = torch.tensor(value, dtype=torch.float32)
        entry = metric.update(LossInput(loss, summed_over=count), META)
        assert entry.serialized.endswith(f",{count}")
        total += loss.item()
    metric.compute()
    assert metric.final_value().value == total / sum(count for _, count in batches)


def test_summed_losses_of_data_parallel_ranks_add_up() -> None:
    """Rank 0's merge of the ranks' parts (loss_reduction="sum"): the losses and their sample
    counts summed, for a built-in output and for a LossOutput."""
    parts = [
        RegressionOutput(torch.tensor(6.0), torch.zeros(3, 1), torch.zeros(3, 1), summed_over=3),
        RegressionOutput(torch.tensor(2.0), torch.zeros(1, 1), torch.zeros(1, 1), summed_over=1),
    ]
    merged = _GlobalBatch(list(parts), [3, 1], summed_loss=True).sync()
    assert float(merged.loss) == 8.0 and merged.summed_over == 4
    losses = [LossOutput(torch.tensor(6.0), 3), LossOutput(torch.tensor(2.0), 1)]
    merged = _GlobalBatch(list(losses), [3, 1], summed_loss=True).sync()
    assert float(merged.loss) == 8.0 and merged.summed_over == 4
