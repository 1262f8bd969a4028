"""A DataModule in place of the two loaders: prepared once, set up everywhere, the same run."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.data import DataLoaderBuilder, DataModule, InMemDataset
from ember.distributed import spawn
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining
from tests.train import data_module_ranks
from tests.train.fixtures import TinyRegressor, batcher, read_lines, samples


class Regression(DataModule):
    """The fixtures' regression data, shuffled, with a validation set."""

    def __init__(self, batch_size: int = 4, seed: int = 3) -> None:
        self.batch_size, self.seed = batch_size, seed
        self.calls: list[str] = []

    def prepare(self) -> None:
        self.calls.append("prepare")

    def setup(self) -> None:
        self.calls.append("setup")
        self.items = samples(40)

    def train_loader(self) -> Any:
        self.calls.append("train_loader")
        builder = DataLoaderBuilder(batcher).batch_size(self.batch_size).shuffle(self.seed)
        return builder.build(InMemDataset(self.items[:32]))

    def valid_loader(self) -> Any:
        self.calls.append("valid_loader")
        return DataLoaderBuilder(batcher).batch_size(8).build(InMemDataset(self.items[32:]))


def run(directory: Path, data: Any, valid: Any = None, **settings: Any) -> TinyRegressor:
    torch.manual_seed(0)
    model = TinyRegressor()
    training = (
        SupervisedTraining(directory, data, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(settings.get("epochs", 3))
    )
    if settings.get("checkpoints"):
        training = training.with_default_checkpointers()
    if settings.get("resume"):
        training = training.resume_latest()
    result = training.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    assert result.error is None, result.traceback
    return model


def test_a_data_module_trains_exactly_like_its_two_loaders(tmp_path: Path) -> None:
    """The same weights and the same Loss lines as the run given its loaders; prepare, setup
    and the loaders are called once each, in that order; config.json names the module."""
    module = Regression()
    ours = run(tmp_path / "module", module)
    reference = Regression()
    reference.setup()
    theirs = run(tmp_path / "loaders", reference.train_loader(), reference.valid_loader())
    for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
        assert torch.equal(a, b)
    for split in ("train", "valid"):
        for epoch in (1, 2, 3):
            path = Path(split, f"epoch-{epoch}", "Loss.log")
            assert read_lines(tmp_path / "module" / path) == read_lines(tmp_path / "loaders" / path)
    assert module.calls == ["prepare", "setup", "train_loader", "valid_loader"]
    described = json.loads((tmp_path / "module" / "config.json").read_text())["data_module"]
    assert described["class"].endswith("Regression")
    assert described["attributes"] == {"batch_size": 4, "seed": 3}


class TrainOnly(DataModule):
    def train_loader(self) -> Any:
        return DataLoaderBuilder(batcher).batch_size(4).build(InMemDataset(samples(8)))


class Broken(Regression):
    def valid_loader(self) -> Any:
        return None


def test_what_a_data_module_run_refuses(tmp_path: Path) -> None:
    """A module that does not override valid_loader trains only (metrics() registers the
    train split); one whose valid_loader returns None, or a valid loader given beside a
    module, is refused naming the fix."""
    training = SupervisedTraining(tmp_path / "a", TrainOnly()).metrics(LossMetric())
    assert [split.value for split, _ in training.config.metrics] == ["train"]
    with pytest.raises(ValueError, match="no valid loader"):
        training.metric_valid_numeric(LossMetric())
    with pytest.raises(ValueError, match=r"Broken.valid_loader\(\) returned None"):
        run(tmp_path / "b", Broken())
    with pytest.raises(TypeError, match="Regression is a data module: it gives the valid loader"):
        SupervisedTraining(tmp_path / "c", Regression(), TrainOnly().train_loader())


class Stateful(Regression):
    """A data module with state: how many times setup ran, across resumes."""

    def __init__(self) -> None:
        super().__init__()
        self.setups = 0

    def setup(self) -> None:
        super().setup()
        self.setups += 1

    def state_dict(self) -> dict[str, Any]:
        return {"setups": self.setups}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.setups = state["setups"] + self.setups


def test_a_data_module_with_state_joins_the_checkpoints(tmp_path: Path) -> None:
    """Its state_dict is saved with every checkpoint and loaded back on resume; the resumed
    run ends as an uninterrupted one."""
    straight = run(tmp_path / "a", Stateful(), checkpoints=True)
    run(tmp_path / "b", Stateful(), epochs=2, checkpoints=True)
    module = Stateful()
    resumed = run(tmp_path / "b", module, checkpoints=True, resume=True)
    assert module.setups == 2  # its own setup, and the first run's from the checkpoint
    for a, b in zip(straight.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_under_ddp_prepare_runs_once_and_setup_on_every_rank(tmp_path: Path) -> None:
    """Two gloo ranks on one machine: prepare() once (local rank 0), before either setup()
    (which reads what it wrote), setup() on each rank."""
    spawn(
        data_module_ranks.prepare_once_setup_per_rank,
        2,
        str(tmp_path),
        timeout=timedelta(seconds=30),
        join_timeout=100,
    )
    calls = sorted(read_lines(tmp_path / "calls.txt"))
    assert calls == ["prepare 0", "setup 0", "setup 1"]


class WithTest(Regression):
    """A data module with a test set."""

    def test_loader(self) -> Any:
        return DataLoaderBuilder(batcher).batch_size(8).build(InMemDataset(self.items[:8]))


def test_with_test_without_a_loader_evaluates_the_modules_test_loader(tmp_path: Path) -> None:
    """with_test("test") takes the data module's test_loader() at launch: the evaluation is the
    one with_test("test", loader) makes; a run without such a module is refused naming the fix."""
    torch.manual_seed(0)
    model = TinyRegressor()
    training = (
        SupervisedTraining(tmp_path / "a", WithTest())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_test("test", checkpoint=None)
    )
    ours = training.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    reference = WithTest()
    reference.setup()
    torch.manual_seed(0)
    model = TinyRegressor()
    theirs = (
        SupervisedTraining(tmp_path / "b", reference.train_loader(), reference.valid_loader())
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_test("test", reference.test_loader(), checkpoint=None)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.05)))
    )
    assert ours.evaluation is not None and theirs.evaluation is not None
    assert str(ours.evaluation) == str(theirs.evaluation)
    with pytest.raises(ValueError, match=r"has no data module that gives one: pass the loader"):
        SupervisedTraining(tmp_path / "c", Regression()).with_test("test")
