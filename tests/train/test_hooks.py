"""Hooks at the loop's boundaries, in event order, and user state kept in checkpoints."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.train import (
    CliMetricsRenderer,
    Hooks,
    Learner,
    LossMetric,
    Split,
    SupervisedTraining,
    TrainOutput,
    current_step,
)
from tests.train.fixtures import Batch, TinyRegressor, loader


class Recorder(Hooks):
    """Writes each hook call next to the renderer's events, to see the order."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def on_epoch_start(self, epoch: int) -> None:
        self.seen.append(f"epoch_start {epoch}")

    def on_split_start(self, split: Split, epoch: int) -> None:
        self.seen.append(f"split_start {split.value} {epoch}")

    def on_split_end(self, split: Split, epoch: int) -> None:
        self.seen.append(f"split_end {split.value} {epoch}")

    def on_epoch_end(self, epoch: int) -> None:
        self.seen.append(f"epoch_end {epoch}")


class Counter:
    """A user's own state: the batches seen, from the step context, with a tensor."""

    def __init__(self) -> None:
        self.batches = 0
        self.total = torch.zeros(3)

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches, "total": self.total.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = state["batches"]
        self.total = state["total"].clone()


class Counting(TinyRegressor):
    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def train_step(self, batch: Batch) -> TrainOutput[Any]:
        context = current_step()
        assert context is not None and context.batch is batch
        self.counter.batches += 1
        self.counter.total += batch.x.sum(dim=0)
        return super().train_step(batch)


def test_hooks_run_at_each_boundary_in_event_order(tmp_path: Path) -> None:
    """epoch_start, then each split's start after its StartSplit and end after its EndSplit,
    then epoch_end; a model implementing TrainingHooks is called too."""
    seen: list[str] = []

    class Watch(CliMetricsRenderer):
        def start_split(self, split: Split, total_items: int | None) -> None:
            seen.append(f"StartSplit {split.value}")
            super().start_split(split, total_items)

    class HookedModel(TinyRegressor, Recorder):
        def __init__(self) -> None:
            TinyRegressor.__init__(self)
            Recorder.__init__(self, [])

    torch.manual_seed(0)
    model = HookedModel()
    result = (
        SupervisedTraining(tmp_path, loader(8, 4), loader(4, 4))
        .renderer(Watch(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(2)
        .with_hooks(Recorder(seen))
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None, result.traceback
    hooks = [s for s in seen if not s.startswith("StartSplit")]
    per_epoch = ["epoch_start {e}", "split_start train {e}", "split_end train {e}"]
    per_epoch += ["split_start valid {e}", "split_end valid {e}", "epoch_end {e}"]
    assert hooks == [line.format(e=e) for e in (1, 2) for line in per_epoch]
    assert model.seen == hooks


def run(directory: Path, counter: Counter, epochs: int, resume: int | None) -> TinyRegressor:
    torch.manual_seed(0)
    model = Counting(counter)
    builder = (
        SupervisedTraining(directory, loader(12, 4, shuffle=2), loader(4, 4))
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .with_default_checkpointers()
        .with_stateful("counter", counter)
    )
    if resume is not None:
        builder = builder.checkpoint(resume)
    result = builder.launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    assert result.error is None, result.traceback
    return model


def test_user_state_joins_the_checkpoints_and_resumes_exactly(tmp_path: Path) -> None:
    """with_stateful: the counter and its tensor are restored, and the run ends as an
    uninterrupted one."""
    straight = Counter()
    run(tmp_path / "a", straight, 3, None)
    resumed = Counter()
    run(tmp_path / "b", Counter(), 2, None)
    run(tmp_path / "b", resumed, 3, 2)
    assert resumed.batches == straight.batches == 9
    assert torch.equal(resumed.total, straight.total)


def test_bad_hooks_and_state_are_refused(tmp_path: Path) -> None:
    """Objects that lack the protocols' members, and a state name used twice, are refused."""
    builder = SupervisedTraining(tmp_path, loader(4), loader(4))
    with pytest.raises(
        TypeError,
        match=r"object has none of the hooks .on_epoch_start, on_split_start, on_split_end, "
        r"on_epoch_end.; define at least one",
    ):
        builder.with_hooks(object())
    with pytest.raises(TypeError, match="state object lacks state_dict, load_state_dict"):
        builder.with_stateful("x", object())  # type: ignore[arg-type]
    builder.with_stateful("x", Counter())
    with pytest.raises(ValueError, match="'x' is already kept"):
        builder.with_stateful("x", Counter())


class ResetsHiddenState(TinyRegressor):
    """A model with one hook only (the LSTM hidden-state reset of the docs)."""

    def __init__(self) -> None:
        super().__init__()
        self.starts: list[tuple[str, int]] = []

    def on_split_start(self, split: Split, epoch: int) -> None:
        self.starts.append((split.value, epoch))


class EpochEnds:
    """A with_hooks object with one hook only, not a Hooks subclass."""

    def __init__(self) -> None:
        self.ends: list[int] = []

    def on_epoch_end(self, epoch: int) -> None:
        self.ends.append(epoch)


def test_each_hook_an_object_has_is_called_and_the_ones_it_lacks_are_skipped(
    tmp_path: Path,
) -> None:
    model, ends = ResetsHiddenState(), EpochEnds()
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1))
    training = SupervisedTraining(tmp_path, loader(4), loader(4)).with_hooks(ends)
    training.num_epochs(2).renderer(CliMetricsRenderer(io.StringIO())).launch(learner)
    assert model.starts == [("train", 1), ("valid", 1), ("train", 2), ("valid", 2)]
    assert ends.ends == [1, 2]
