"""Plain models under the data-parallel strategies: a plain ``nn.Module`` with a loss function
and a model that computes its own loss train over 2 gloo processes (DDP, FSDP) as in one; a
GPT-2 sharded by FSDP exports to a directory ``from_pretrained`` loads."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ember.distributed import spawn
from tests.train.strategy import plain_models
from tests.train.strategy.ddp.expect import assert_losses_equal

pytestmark = [pytest.mark.distributed, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("plain")
    spawn(plain_models.ranks, 2, str(out), timeout=timedelta(seconds=30), join_timeout=200)
    return out


@pytest.mark.parametrize("kind", ["plain", "own"])
def test_ddp_trains_a_plain_model_as_one_process(
    two_ranks: Path, tmp_path: Path, kind: str
) -> None:
    """2 ranks end with one process's weights (the ranks' replicas identical) and the same
    Loss lines, for a loss function and for a model's own loss."""
    builder, learner = plain_models.training(tmp_path / kind, kind)
    assert builder.launch(learner).error is None
    ranks = [load_file(two_ranks / f"{kind}-rank{rank}.safetensors") for rank in (0, 1)]
    for name, tensor in learner.model.state_dict().items():
        torch.testing.assert_close(ranks[0][name], tensor, rtol=0, atol=1e-6)
        assert torch.equal(ranks[0][name], ranks[1][name])
    for split in ("train", "valid"):
        relative = Path(split, "epoch-2", "Loss.log")
        assert_losses_equal(two_ranks / f"{kind}-0" / relative, tmp_path / kind / relative)


def test_fsdp_trains_a_plain_model_as_one_process(two_ranks: Path, tmp_path: Path) -> None:
    """Sharded per Linear over 2 ranks, with the optimizer as a factory: one process's weights."""
    builder, learner = plain_models.training(tmp_path, "factory")
    assert builder.launch(learner).error is None
    weights = load_file(two_ranks / "fsdp.safetensors")
    for name, tensor in learner.model.state_dict().items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-6)


def test_a_gpt2_sharded_by_fsdp_trains_as_one_process_and_exports(
    two_ranks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """GPT-2 blocks sharded over 2 ranks: one process's weights; its sharded checkpoint keeps
    the model's configuration and generation configuration, so ember export --format hf writes
    a directory from_pretrained loads into those weights and that generation configuration."""
    import transformers

    from ember.train import export_pretrained

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    builder, learner = plain_models.gpt2_training(tmp_path / "single")
    assert builder.launch(learner).error is None
    weights = load_file(two_ranks / "gpt2.safetensors")
    for name, tensor in learner.model.state_dict().items():
        torch.testing.assert_close(weights[name], tensor, rtol=0, atol=1e-6)
    export_pretrained(two_ranks / "gpt2", tmp_path / "hf", "last")
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, weights[name])
    assert loaded.generation_config == learner.model.generation_config
    assert loaded.generation_config.max_new_tokens == 5
