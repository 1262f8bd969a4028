"""DistributedDataParallel pieces that need no second process: one rank, merges, messages."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from ember.distributed import spawn
from ember.extend import merge_outputs
from ember.train import ClassificationOutput, RegressionOutput, SequenceOutput
from ember.train._strategy.collectives import (
    broadcast_bytes,
    gather_bytes,
    pack_tensors,
    payload_size,
    tensor_header,
    unpack_tensors,
)
from ember.train._strategy.ddp.gradients import raised_by_autograd
from ember.train._strategy.ddp.strategy import DistributedDataParallel
from tests.train.strategy.ddp import helpers as ddp_helpers
from tests.train.strategy.ddp.expect import assert_weights_equal


@pytest.fixture
def one_rank() -> Iterator[None]:
    """A gloo process group of one rank in this process, torn down afterwards."""
    store = dist.HashStore()  # type: ignore[attr-defined]  # exported, but not in the stubs
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


@pytest.mark.usefixtures("one_rank")
@pytest.mark.parametrize("accumulation", [None, 3])
def test_one_rank_is_bit_identical_to_single_device(
    tmp_path: Path, accumulation: int | None
) -> None:
    """With one rank the reduction changes nothing: weights and logs equal SingleDevice's,
    also when gradients are accumulated."""
    results = {}
    for name, strategy in (("single", None), ("ddp", DistributedDataParallel())):
        builder, learner = ddp_helpers.training(tmp_path / name, 2, strategy)
        if accumulation is not None:
            builder = builder.grads_accumulation(accumulation)
        result = builder.launch(learner)
        assert result.error is None, result.traceback
        results[name] = learner.model.state_dict()
    for key, tensor in results["single"].items():
        assert torch.equal(results["ddp"][key], tensor)
    for split in ("train", "valid"):
        relative = Path(split, "epoch-2", "Loss.log")
        ours = (tmp_path / "ddp" / relative).read_text(encoding="utf-8")
        assert ours == (tmp_path / "single" / relative).read_text(encoding="utf-8")


@pytest.mark.usefixtures("one_rank")
def test_bytes_travel_on_one_rank() -> None:
    """broadcast_bytes and gather_bytes hand back what was given (including nothing)."""
    assert broadcast_bytes(b"abc") == b"abc"
    assert broadcast_bytes(b"") == b""
    assert gather_bytes(b"xyz") == [b"xyz"]
    assert gather_bytes(b"") == [b""]


def test_tensors_round_trip_through_a_payload() -> None:
    """Any shape and dtype (scalars, bools, empty tensors, None) comes back equal and aligned."""
    tensors: list[torch.Tensor | None] = [
        torch.tensor(1.5),
        torch.arange(6, dtype=torch.int64).reshape(2, 3),
        None,
        torch.tensor([True, False, True]),
        torch.zeros(0, 4, dtype=torch.bfloat16),
        torch.randn(3, 2, dtype=torch.float64).t(),  # not contiguous
    ]
    header = tensor_header(tensors)
    size = payload_size(header)
    payload = pack_tensors(tensors, size + 32, torch.device("cpu"))  # padding is ignored
    back = unpack_tensors(header, payload)
    for original, received in zip(tensors, back, strict=True):
        if original is None:
            assert received is None
        else:
            assert received is not None and received.dtype == original.dtype
            assert torch.equal(received, original)
    with pytest.raises(TypeError, match="dtype"):
        tensor_header([torch.zeros(1, dtype=torch.float8_e4m3fn)])


def test_built_in_outputs_merge_to_the_global_batch() -> None:
    """Parts concatenate in rank order; a mean loss is weighted by the shares."""
    torch.manual_seed(0)
    out, target = torch.randn(5, 3), torch.randint(0, 3, (5,))
    whole = torch.nn.functional.cross_entropy(out, target)
    parts = [
        ClassificationOutput(torch.nn.functional.cross_entropy(o, t), o, t)
        for o, t in ((out[:3], target[:3]), (out[3:], target[3:]))
    ]
    merged = merge_outputs(parts, [3, 2])
    assert torch.equal(merged.output, out) and torch.equal(merged.targets, target)
    torch.testing.assert_close(merged.loss, whole)
    per_item = [RegressionOutput(torch.ones(2), torch.zeros(2, 1), torch.zeros(2, 1))] * 2
    assert merge_outputs(per_item, [2, 2]).loss.shape == (4,)
    logits = torch.randn(2, 4, 6)
    sequences = [
        SequenceOutput(torch.tensor(1.0), logits[:1], torch.zeros(1, 4, dtype=torch.long)),
        SequenceOutput(torch.tensor(3.0), logits[1:], torch.zeros(1, 4, dtype=torch.long)),
    ]
    merged_sequence = merge_outputs(sequences, [1, 1])
    assert torch.equal(merged_sequence.logits, logits) and merged_sequence.loss.item() == 2.0
    uneven = [
        sequences[0],
        SequenceOutput(torch.tensor(1.0), torch.randn(1, 5, 6), torch.zeros(1, 5)),
    ]
    with pytest.raises(ValueError, match="logits"):
        merge_outputs(uneven, [1, 1])


@dataclass(frozen=True)
class Counts:
    """A user's output that knows how to merge itself."""

    hits: torch.Tensor

    @classmethod
    def merge(cls, parts: list[Counts], sizes: list[int]) -> Counts:
        return cls(torch.stack([p.hits for p in parts]).sum(dim=0))


def test_a_user_output_merges_through_its_classmethod() -> None:
    """``merge(parts, sizes)`` on a dataclass is used; a type without one is refused."""
    merged = merge_outputs([Counts(torch.tensor([1, 2])), Counts(torch.tensor([3, 4]))], [1, 1])
    assert merged.hits.tolist() == [4, 6]
    with pytest.raises(TypeError, match="merge"):
        merge_outputs([object(), object()], [1, 1])


def test_strategy_checks_its_arguments_and_reads_the_rank_from_torchrun(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Bad settings raise at construction; before a process group, RANK says who is main."""
    with pytest.raises(ValueError, match="loss_reduction"):
        DistributedDataParallel(loss_reduction="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        DistributedDataParallel(timeout=timedelta(0))
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        DistributedDataParallel(bucket_cap_mb=0)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    strategy = DistributedDataParallel()
    assert (strategy.rank, strategy.world_size, strategy.is_main) == (1, 2, False)


def test_without_torchrun_the_error_says_how_to_launch(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No process group and no torchrun variables: the run's error names what is missing."""
    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    builder, learner = ddp_helpers.training(tmp_path / "run", 1, DistributedDataParallel("gloo"))
    result = builder.launch(learner)
    assert result.error is not None and "torchrun" in str(result.error)


@pytest.mark.gpu
@pytest.mark.distributed
@pytest.mark.timeout(300)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_nccl_ranks_on_gpus_equal_one_process(tmp_path: Path) -> None:
    """On 1 or 2 GPUs with nccl (cuda:LOCAL_RANK), the weights equal one CUDA process's."""
    world = min(2, torch.cuda.device_count())
    spawn(ddp_helpers.on_gpus, world, str(tmp_path), backend="nccl", join_timeout=240)
    builder, learner = ddp_helpers.training(tmp_path / "single", 3, None)
    learner.model.cuda()
    result = builder.launch(learner)
    assert result.error is None, result.traceback
    weights = [tmp_path / f"gpu-rank{rank}.safetensors" for rank in range(world)]
    assert_weights_equal(weights, learner.model, atol=1e-5)


@pytest.mark.usefixtures("one_rank")
def test_a_ddp_checkpoint_resumes_in_one_process(tmp_path: Path) -> None:
    """Epoch 1 under DDP, epoch 2 resumed on SingleDevice: the weights of 2 epochs on
    SingleDevice, bit for bit (the DDP state only adds the ranks' RNG states)."""
    builder, learner = ddp_helpers.training(tmp_path / "run", 1, DistributedDataParallel())
    assert builder.launch(learner).error is None
    builder, learner = ddp_helpers.training(tmp_path / "run", 2, None, resume=1)
    resumed = builder.launch(learner)
    assert resumed.error is None, resumed.traceback
    builder, reference = ddp_helpers.training(tmp_path / "single", 2, None)
    assert builder.launch(reference).error is None
    for name, tensor in reference.model.state_dict().items():
        assert torch.equal(learner.model.state_dict()[name], tensor)


class _FailingBackward(torch.autograd.Function):
    """The identity, whose backward raises: Python code the backward pass runs."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a custom backward failed")


def _caught(fn: Callable[[], object]) -> RuntimeError:
    with pytest.raises(RuntimeError) as caught:
        fn()
    return caught.value


def test_only_errors_of_torch_s_autograd_engine_are_taken_for_a_failed_all_reduce() -> None:
    """A failed gradient all-reduce surfaces as a RuntimeError out of torch's engine (its
    reducer waits at the end of backward); a forward error, or one raised by Python code the
    backward pass runs, is the user's own and is raised as it is."""
    weight = torch.ones(3, requires_grad=True)
    loss = (weight * 2).sum()
    torch.autograd.backward(loss)
    engine = _caught(lambda: torch.autograd.backward(loss))  # the graph was freed: C++ engine
    assert "second time" in str(engine) and raised_by_autograd(engine)
    custom = _caught(
        lambda: _FailingBackward.apply(weight).sum().backward()  # type: ignore[no-untyped-call]
    )
    assert not raised_by_autograd(custom)
    forward = _caught(lambda: torch.ones(2) @ torch.ones(3))
    assert not raised_by_autograd(forward)
