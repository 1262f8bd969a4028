"""Several named validation sets (issue 40): ``SupervisedTraining(directory, train, {"clean": a,
"noisy": b})`` validates each set on its own, the main one under the metrics' names, every other
under ``"{metric} ({set})"``, through logs, summary, trackers, early stopping, checkpoints and
exact resume (``docs/training.md``, "Several validation sets")."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import TensorDataset

from ember import CheckpointError, TrainingError
from ember._rundir.metric_logs import format_number
from ember._rundir.steps import read_steps
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset, Progress
from ember.extend import EndSplit, ProcessedItem, StartSplit
from ember.train import (
    Callback,
    CliMetricsRenderer,
    CsvMetricLogger,
    Direction,
    InMemoryMetricLogger,
    Learner,
    LossMetric,
    MetricCheckpointingStrategy,
    MetricEarlyStoppingStrategy,
    RegressionOutput,
    RunView,
    Split,
    StoppingCondition,
    SupervisedTraining,
    TensorBoardLogger,
    TorchLrScheduler,
    TrainingItem,
    ValueMetric,
)
from ember.train._checkpoint.mid_round import ResumePoint
from ember.train._logger.store import EventStore
from ember.train._metric.registered import MetricsTraining
from ember.train._processor import FullEventProcessorTraining
from ember.train._step import current_step
from tests.train.fixtures import Batch, TinyRegressor, batcher, loader, samples
from tests.train.test_mid_round import latest, logs, same_weights
from tests.train.test_schedule import learner

CLEAN, NOISY = 10, 13  # items; batches of 4: tails of 2 and 1


def noisy(count: int = NOISY, seed: int = 2) -> DataLoader[Batch]:
    """Targets of the opposite sign: the better the model fits the clean data, the worse its
    loss on these (so the two sets' values move apart)."""
    items = [(x, -y) for x, y in samples(count, seed)]
    return DataLoaderBuilder(batcher).batch_size(4).build(InMemDataset(items))


def valid_sets() -> dict[str, DataLoader[Batch]]:
    return {"clean": loader(CLEAN, seed=1), "noisy": noisy()}


def hand_loss(model: torch.nn.Module, items: list[tuple[list[float], float]]) -> float:
    """``model``'s loss over ``items`` as LossMetric's epoch value is (the per-item mean: each
    batch's mean squared error weighted by its items, batches of 4), in one raw PyTorch
    evaluation."""
    x = torch.tensor([item[0] for item in items])
    y = torch.tensor([[item[1]] for item in items])
    with torch.no_grad():
        weighted = [
            float(torch.nn.functional.mse_loss(model(x[i : i + 4]), y[i : i + 4]))
            * len(y[i : i + 4])
            for i in range(0, len(items), 4)
        ]
    return sum(weighted) / len(items)


class Recorder(Callback):
    """Each validation's values as the loop gives them, and a hand evaluation of the model on
    each set at that moment."""

    def __init__(self) -> None:
        self.values: dict[int, dict[str, float]] = {}
        self.hand: dict[int, dict[str, float]] = {}
        self.points: list[tuple[str, Split, int]] = []

    def on_run_start(self, run: RunView) -> None:
        self.run = run

    def on_split_start(self, split: Split, epoch: int) -> None:
        self.points.append(("start", split, epoch))

    def on_split_end(self, split: Split, epoch: int) -> None:
        self.points.append(("end", split, epoch))

    def on_validation_end(self, epoch: int, values: Mapping[str, float]) -> None:
        self.values[epoch] = dict(values)
        model = self.run.model
        self.hand[epoch] = {
            "Loss": hand_loss(model, samples(CLEAN, 1)),
            "Loss (noisy)": hand_loss(model, [(x, -y) for x, y in samples(NOISY, 2)]),
        }


def training(directory: Path, epochs: int = 3, stream: io.StringIO | None = None) -> Any:
    torch.manual_seed(0)
    return (
        SupervisedTraining(directory, loader(16, shuffle=3), valid_sets())
        .renderer(CliMetricsRenderer(stream or io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
    )


def test_each_set_is_validated_on_its_own_under_its_own_name(tmp_path: Path) -> None:
    """Every epoch each set's Loss equals a raw evaluation of the model on that set alone (the
    main set under "Loss", the other under "Loss (noisy)"): in on_validation_end, in each set's
    log file, its steps and result.values; one valid split a round (the callbacks' points and
    the screen count every set's items); config.json names and describes the sets."""
    recorder, stream = Recorder(), io.StringIO()
    result = training(tmp_path / "run", stream=stream).with_callbacks(recorder).launch(learner())
    assert result.error is None, result.traceback
    for epoch in (1, 2, 3):
        values = recorder.values[epoch]
        assert sorted(values) == ["Loss", "Loss (noisy)"]
        assert values == pytest.approx(recorder.hand[epoch], rel=1e-5)
        for name, file in (("Loss", "Loss.log"), ("Loss (noisy)", "Loss_(noisy).log")):
            lines = (tmp_path / "run" / "valid" / f"epoch-{epoch}" / file).read_text().splitlines()
            assert len(lines) == (4 if name == "Loss" else 5)  # a line a batch, then the epoch's
            assert lines[-1] == f"{values[name]!r},final"
    assert recorder.values[3]["Loss (noisy)"] > recorder.values[1]["Loss (noisy)"]
    assert recorder.values[3]["Loss"] < recorder.values[1]["Loss"]
    steps = read_steps(tmp_path / "run" / "valid", tmp_path / "run")
    assert steps[2] == {"Loss": [(8, 4)], "Loss (noisy)": [(8, 5)]}  # at the round's step
    assert result.values("valid", "Loss (noisy)") == {
        epoch: recorder.values[epoch]["Loss (noisy)"] for epoch in (1, 2, 3)
    }
    valid_points = [point for point in recorder.points if point[1] is Split.VALID]
    assert valid_points == [
        (which, Split.VALID, e) for e in (1, 2, 3) for which in ("start", "end")
    ]
    screen = stream.getvalue()
    assert screen.count(f"Starting split 'valid' with {CLEAN + NOISY} items.") == 3
    assert f"valid {CLEAN + NOISY}/{CLEAN + NOISY} items (100%)" in screen
    ended = f"Split ended: valid  Loss {recorder.values[3]['Loss']:.4g}"
    assert f"{ended} · Loss (noisy) {recorder.values[3]['Loss (noisy)']:.4g}" in screen
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["valid"]["name"] == "clean" and config["valid"]["items"] == CLEAN
    noisy_set = {"batch_size": 4, "batches": 4, "items": NOISY, "seed": None}
    assert config["valid_sets"] == {"noisy": noisy_set}
    assert config["metrics"]["valid"] == ["Loss", "Loss (noisy)"]
    assert config["directions"] == {"Loss": "lowest", "Loss (noisy)": "lowest"}


def test_a_single_named_set_is_a_run_of_one_valid_loader(tmp_path: Path) -> None:
    """valid={"clean": a} logs what valid=a logs, byte for byte, and trains the same weights."""
    runs = {}
    for name, valid in (
        ("plain", loader(CLEAN, seed=1)),
        ("named", {"clean": loader(CLEAN, seed=1)}),
    ):
        torch.manual_seed(0)
        trainer = learner()
        built = SupervisedTraining(tmp_path / name, loader(16, shuffle=3), valid)
        built = built.renderer(CliMetricsRenderer(io.StringIO())).metrics(LossMetric())
        assert built.num_epochs(2).launch(trainer).error is None
        runs[name] = trainer.model
    assert same_weights(runs["plain"], runs["named"])
    assert logs(tmp_path / "plain") == logs(tmp_path / "named")


def test_the_summary_has_a_row_per_set(tmp_path: Path) -> None:
    """The summary table and summary.json: "Valid | Loss" (the main set) and "Valid | Loss
    (noisy)", each with its own best and worst epochs."""
    result = training(tmp_path / "run").summary().launch(learner())
    assert result.summary is not None
    rows = {(row.split, row.name): row for row in result.summary.metrics}
    assert list(rows) == [("Train", "Loss"), ("Valid", "Loss"), ("Valid", "Loss (noisy)")]
    noisy_values = result.values("valid", "Loss (noisy)")
    row = rows[("Valid", "Loss (noisy)")]
    assert (row.min_epoch, row.min_value) == (1, noisy_values[1])
    assert (row.max_epoch, row.max_value) == (3, noisy_values[3])
    assert "| Valid | Loss (noisy) |" in str(result.summary)
    written = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [(r["split"], r["name"]) for r in written["metrics"]] == list(rows)


def test_early_stopping_watches_the_set_it_names(tmp_path: Path) -> None:
    """Early stopping on "Loss (noisy)" stops once that set's value stopped improving (its
    reason names it), while the main set's Loss, still improving, would not stop the run."""
    condition = StoppingCondition.no_improvement_since(1)
    stopping = MetricEarlyStoppingStrategy("Loss (noisy)", Direction.LOWEST, Split.VALID, condition)
    result = training(tmp_path / "noisy", 5).early_stopping(stopping).launch(learner())
    assert result.error is None, result.traceback
    assert result.last_epoch == 2
    assert result.stop_reason is not None and "valid Loss (noisy)" in result.stop_reason
    main = MetricEarlyStoppingStrategy("Loss", Direction.LOWEST, Split.VALID, condition)
    assert training(tmp_path / "main", 5).early_stopping(main).launch(learner()).last_epoch == 5


def test_the_best_checkpoint_of_a_set(tmp_path: Path) -> None:
    """MetricCheckpointingStrategy("Loss (noisy)") keeps the epoch best on that set (the
    first), "Loss" the one best on the main set (the last); with_test's "best" is that one."""
    kept = {}
    for name in ("Loss (noisy)", "Loss"):
        strategy = MetricCheckpointingStrategy(name, Direction.LOWEST, Split.VALID)
        built = training(tmp_path / name).with_checkpointing_strategy(strategy)
        result = built.with_default_checkpointers().launch(learner())
        assert result.error is None, result.traceback
        kept[name] = (sorted(result.checkpoints), result.best_epoch)
    assert kept == {"Loss (noisy)": ([1], 1), "Loss": ([3], 3)}


def test_trackers_get_every_set_under_its_name(tmp_path: Path) -> None:
    """A CsvMetricLogger reads both sets' epoch values back; TensorBoard (its own event
    reader) has a valid/Loss and a valid/Loss (noisy) series; a stop_when on the other set
    reads its values."""
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator"
    )
    csv, memory = CsvMetricLogger(tmp_path / "metrics.csv"), InMemoryMetricLogger()
    built = training(tmp_path / "run").with_metric_logger(csv).with_metric_logger(memory)
    result = built.with_metric_logger(TensorBoardLogger(tmp_path / "tb")).launch(learner())
    assert result.error is None, result.traceback
    reread = CsvMetricLogger(tmp_path / "metrics.csv")
    for name in ("Loss", "Loss (noisy)"):
        expected = result.values("valid", name)
        for epoch in (1, 2, 3):
            assert reread.read_numeric(name, epoch, Split.VALID)[-1].value == expected[epoch]
            assert memory.read_numeric(name, epoch, Split.VALID)[-1].value == expected[epoch]
    accumulator = event_accumulator.EventAccumulator(str(tmp_path / "tb"))
    accumulator.Reload()
    for name in ("Loss", "Loss (noisy)"):
        series = [(event.step, event.value) for event in accumulator.Scalars(f"valid/{name}")]
        expected = result.values("valid", name)
        assert series == [
            (step, pytest.approx(expected[epoch], rel=1e-6))
            for epoch, step in ((1, 4), (2, 8), (3, 12))
        ]
    first = result.values("valid", "Loss (noisy)")[1]
    stopped = training(tmp_path / "threshold").stop_when("Loss (noisy)", first, split="valid")
    outcome = stopped.launch(learner())
    assert outcome.last_epoch == 1
    shown = format_number(first)
    assert outcome.stop_reason == f"stop_when: valid Loss (noisy) {shown} <= {shown} (epoch 1)"


def test_a_scheduler_may_watch_another_set(tmp_path: Path) -> None:
    """ReduceLROnPlateau(monitor="Loss (noisy)") is stepped with that set's values: the noisy
    loss never improves after epoch 1, so the lr is cut after epochs 2 and 3."""
    model = TinyRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
    scheduler = TorchLrScheduler(plateau, monitor="Loss (noisy)")
    trainer = Learner(model, optimizer, scheduler)
    assert training(tmp_path / "run").launch(trainer).error is None
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05 * 0.5**2)


def test_a_stop_during_validation_waits_for_every_set(tmp_path: Path) -> None:
    """A stop asked while the second set is validated: both sets are validated to their end,
    the round completes (each set's epoch line, the round's checkpoint) and no further batch
    trains; resumed, the run ends as one that never stopped (weights, both sets' logs)."""
    full = learner()
    assert training(tmp_path / "full").launch(full).error is None
    directory = tmp_path / "stopped"
    built = training(directory).with_default_checkpointers()
    interrupter = built.interrupter()
    trainer = learner()
    inference = trainer.model.inference_step

    def step(batch: Batch) -> Any:
        context = current_step()
        if context is not None and context.epoch == 1 and batch.x.shape[0] == 1:
            interrupter.stop("asked in validation")  # in the noisy set's last batch
        return inference(batch)

    trainer.model.inference_step = step  # type: ignore[method-assign]  # the test's spy
    stopped = built.launch(trainer)
    assert stopped.stop_reason == "asked in validation" and stopped.last_epoch == 1
    for file in ("Loss.log", "Loss_(noisy).log"):
        assert (directory / "valid" / "epoch-1" / file).read_text().endswith(",final\n")
    assert not (directory / "train" / "epoch-2").exists()
    resumed = learner()
    assert (
        training(directory).with_default_checkpointers().resume_latest().launch(resumed).error
        is None
    )
    assert same_weights(full.model, resumed.model)
    assert logs(directory) == logs(tmp_path / "full")


@pytest.mark.parametrize("stop_at", [2, 3, 5])
def test_exact_resume_from_inside_a_round_and_from_its_end(tmp_path: Path, stop_at: int) -> None:
    """Stopped after optimizer step ``stop_at + 1`` (inside round 1 or 2, or at round 1's
    last step, before its validation: a mid-round checkpoint), resumed to the end of round 2,
    then resumed from that round end: the weights and every log of both sets are those of a run
    that never stopped; each set's loader is in the checkpoints, by its key."""
    full = learner()
    assert training(tmp_path / "full").launch(full).error is None
    directory = tmp_path / "chain"
    built = training(directory).with_default_checkpointers()
    interrupter, trainer = built.interrupter(), learner()

    def stop(_: Any) -> None:
        context = current_step()
        if context is not None and context.optimizer_steps == stop_at:
            interrupter.stop("test")

    trainer.model.on_train_step = stop
    assert built.launch(trainer).stop_reason == "test"
    point = latest(directory)
    assert point == ResumePoint(1 + stop_at // 4, stop_at + 1)
    resumed = training(directory).with_default_checkpointers().resume_latest().num_epochs(2)
    assert resumed.launch(learner()).error is None
    assert latest(directory) == ResumePoint(2)
    with safe_open(directory / "checkpoint" / "state-2.safetensors", "pt") as record:
        state = json.loads(record.metadata()["ember"])["metadata"]
    assert sorted(state["loaders"]) == ["train", "valid", "valid:noisy"]
    final = learner()
    result = training(directory).with_default_checkpointers().resume_latest().launch(final)
    assert result.error is None, result.traceback
    assert same_weights(full.model, final.model)
    assert logs(directory) == logs(tmp_path / "full")


def test_a_checkpoint_without_a_set_s_loader_is_refused_naming_it(tmp_path: Path) -> None:
    """A run of one valid loader resumed with another validation set added: its loader has no
    position in the checkpoint, and the resume is refused naming it."""
    torch.manual_seed(0)
    train, valid = loader(16, shuffle=3), loader(CLEAN, seed=1)
    one = SupervisedTraining(tmp_path, train, valid).metrics(LossMetric())
    one = one.renderer(CliMetricsRenderer(io.StringIO())).with_default_checkpointers()
    assert one.launch(learner()).error is None
    resumed = training(tmp_path, 2).with_default_checkpointers().resume_latest()
    with pytest.raises(TrainingError) as raised:
        resumed.launch(learner())
    assert isinstance(raised.value.__cause__, CheckpointError)
    assert "has no valid:noisy loader" in str(raised.value.__cause__)


# --- the metrics thread ----------------------------------------------------------------------


class ProgressRecorder(CliMetricsRenderer):
    """Records what the split's progress reads after each batch."""

    def __init__(self) -> None:
        super().__init__(io.StringIO())
        self.progress: list[int] = []

    def update_split(self, items_processed: int) -> None:
        self.progress.append(items_processed)
        super().update_split(items_processed)


@settings(max_examples=40, deadline=None)
@given(
    sets=st.lists(st.lists(st.floats(0, 10), min_size=1, max_size=5), min_size=1, max_size=3),
    cuts=st.lists(st.integers(1, 15), max_size=4),
)
def test_each_item_updates_only_its_set_s_metrics_in_any_chunking(
    sets: list[list[float]], cuts: list[int]
) -> None:
    """However the metrics thread receives the valid split's events (chunks cut anywhere, a
    chunk holding the end of one set and the start of the next), each set's epoch value is the
    mean of its own batches' losses, under its own name, and the renderer's progress counts the
    split's items across the sets (2 items a batch)."""
    metrics = MetricsTraining()
    metrics.register(Split.VALID, LossMetric())
    others = [f"s{index}" for index in range(1, len(sets))]
    for other in others:
        metrics.add_valid_set(other)
    names: list[str | None] = [None, *others]
    renderer, logger = ProgressRecorder(), InMemoryMetricLogger()
    processor = FullEventProcessorTraining(metrics, renderer, EventStore([logger]))
    events: list[tuple[Split, Any]] = [(Split.VALID, StartSplit(1, 2 * sum(map(len, sets))))]
    for name, losses in zip(names, sets, strict=True):
        for index, loss in enumerate(losses, 1):
            tensor = torch.tensor(loss)
            output = RegressionOutput(tensor, tensor.reshape(1, 1), tensor.reshape(1, 1))
            done = Progress(2 * index, 2 * len(losses))
            events.append(
                (Split.VALID, ProcessedItem(TrainingItem(output, done, index, None), name))
            )
    events.append((Split.VALID, EndSplit(1)))
    bounds = [0, *sorted({cut for cut in cuts if cut < len(events)}), len(events)]
    for start, end in itertools.pairwise(bounds):
        processor.process_chunk(events[start:end])
    assert renderer.progress == list(range(2, 2 * sum(map(len, sets)) + 1, 2))
    for name, losses in zip(names, sets, strict=True):
        logged = "Loss" if name is None else f"Loss ({name})"
        finals = [value for value in logger.values[(logged, Split.VALID, 1)] if "final" in value]
        assert [float(value.split(",")[0]) for value in finals] == pytest.approx(
            [sum(torch.tensor(losses).tolist()) / len(losses)], rel=1e-6
        )


# --- what the builder takes ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("valid", "error", "message"),
    [
        ({}, ValueError, "valid is an empty mapping: give {name: loader} with at least one"),
        ({"": loader(4)}, ValueError, "the validation set name '' is not one ember can use"),
        ({"a b": loader(4)}, ValueError, "the validation set name 'a b' is not one ember can use"),
        ({"x/y": loader(4)}, ValueError, "the validation set name 'x/y' is not one ember can"),
        ({1: loader(4)}, TypeError, "a validation set's name must be a str, got 1 (int)"),
        ({"clean": loader(4), "noisy": [1, 2]}, TypeError, "the valid loader 'noisy'"),
    ],
)
def test_a_bad_mapping_is_refused_naming_the_value(
    tmp_path: Path, valid: Any, error: type[Exception], message: str
) -> None:
    """An empty mapping, a name that is not a str or holds what a metric or file name cannot,
    a value that is not a loader: refused at the builder's call, naming it."""
    with pytest.raises(error) as raised:
        SupervisedTraining(tmp_path, loader(8), valid)
    assert message in str(raised.value)


def test_a_metric_whose_set_name_is_taken_is_refused(tmp_path: Path) -> None:
    """A valid metric named as another set's value of a metric ("Loss (noisy)" beside Loss
    and the set "noisy"), either way round, is refused at its registration."""
    built = SupervisedTraining(tmp_path, loader(8), valid_sets()).metric_valid_numeric(LossMetric())
    with pytest.raises(ValueError, match=r"'Loss \(noisy\)' on the valid split, where that name"):
        built.metric_valid_numeric(ValueMetric("Loss (noisy)"))
    other = SupervisedTraining(tmp_path, loader(8), valid_sets())
    other = other.metric_valid_numeric(ValueMetric("Loss (noisy)"))
    with pytest.raises(
        ValueError, match=r"LossMetric's values would be logged as 'Loss \(noisy\)'"
    ):
        other.metric_valid_numeric(LossMetric())
    assert other.metric_train_numeric(LossMetric()).config.metrics[-1][0] is Split.TRAIN


def collate(rows: list[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
    return Batch(torch.stack([row[0] for row in rows]), torch.stack([row[1] for row in rows]))


def test_torch_loaders_and_the_debugging_modes_apply_to_every_set(tmp_path: Path) -> None:
    """A torch DataLoader is a set too; limit_batches(valid=1) validates one batch of every set,
    overfit_batches(1) every set on the train loader's first batch; fast_dev_run writes
    nothing and still validates each set."""
    x, y = (
        torch.tensor([x for x, _ in samples(6, 3)]),
        torch.tensor([[y] for _, y in samples(6, 3)]),
    )
    torch_noisy: TorchLoader[tuple[torch.Tensor, ...]] = TorchLoader(
        TensorDataset(x, y), batch_size=4, collate_fn=collate
    )
    sets: dict[str, DataLoader[Any] | TorchLoader[Any]] = {
        "clean": loader(CLEAN, seed=1),
        "noisy": torch_noisy,
    }
    modes: list[tuple[str, Callable[[SupervisedTraining], SupervisedTraining]]] = [
        ("limited", lambda built: built.limit_batches(valid=1)),
        ("overfit", lambda built: built.overfit_batches(1)),
    ]
    for mode, configure in modes:
        recorder = Recorder()
        built = SupervisedTraining(tmp_path / mode, loader(16), sets).metrics(LossMetric())
        built = configure(built.renderer(CliMetricsRenderer(io.StringIO())))
        result = built.with_callbacks(recorder).launch(learner())
        assert result.error is None, result.traceback
        for file in ("Loss.log", "Loss_(noisy).log"):
            lines = (tmp_path / mode / "valid" / "epoch-1" / file).read_text().splitlines()
            assert len(lines) == 2  # one batch, then the epoch's value
        if mode == "overfit":  # both sets are the same first train batch
            values = recorder.values[1]
            assert values["Loss"] == values["Loss (noisy)"]
    stream = io.StringIO()
    built = SupervisedTraining(tmp_path / "dev", loader(16), sets).metrics(LossMetric())
    result = built.renderer(CliMetricsRenderer(stream)).fast_dev_run().launch(learner())
    assert result.error is None and not (tmp_path / "dev").exists()
    assert "Starting split 'valid' with 8 items." in stream.getvalue()  # a batch of each set
    assert "Loss (noisy)" in stream.getvalue()
