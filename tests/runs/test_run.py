"""ember.runs.load: a run read back from its directory equals what training logged (every value,
its global step, the epoch values, the configuration and how the run ended), also for step
runs with accumulation, resumed runs, runs still being written, and several runs at once."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.extend import MetricValue
from ember.runs import MetricRow, Run, Runs, load
from ember.train import (
    InMemoryMetricLogger,
    Learner,
    LearnerSummary,
    LearningResult,
    LossMetric,
)
from tests.train.fixtures import TinyRegressor, loader, quiet


def train(
    directory: Path,
    *,
    epochs: int = 3,
    memory: InMemoryMetricLogger | None = None,
    configure: Any = None,
    lr: float = 0.05,
    stop_at_batch: int | None = None,
) -> LearningResult[TinyRegressor]:
    """A small regression run with Loss on both splits, checkpoints and a summary (3 train
    batches an epoch); ``stop_at_batch``: the interrupter stops it in that batch."""
    torch.manual_seed(0)
    model = TinyRegressor()
    builder = (
        quiet(directory, loader(10, shuffle=1), loader(6, seed=1))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .summary()
        .with_default_checkpointers()
        .hparams({"lr": lr})
    )
    if memory is not None:
        builder = builder.with_metric_logger(memory)
    if configure is not None:
        builder = configure(builder)
    if stop_at_batch is not None:
        interrupter, batches = builder.interrupter(), iter(range(1, 1000))
        model.on_train_step = lambda _: (
            interrupter.stop("stopped by the test") if next(batches) == stop_at_batch else None
        )
    return builder.launch(Learner(model, torch.optim.SGD(model.parameters(), lr=lr)))


def logged_rows(memory: InMemoryMetricLogger, run: str, *, final: bool) -> list[MetricRow]:
    """What the loggers were given, as the rows ember.runs should read back."""

    def row(value: MetricValue) -> MetricRow:
        weight = None if final else value.weight
        return MetricRow(
            run, value.split.value, value.epoch, value.step, value.name, value.value, weight
        )

    return [row(value) for value in memory.numbers if value.final is final]


def by_place(rows: list[MetricRow]) -> list[MetricRow]:
    """Rows in the reader's order: by split, epoch and metric, then as logged."""
    order = {"train": 0, "valid": 1}
    return sorted(rows, key=lambda row: (order[row.split], row.epoch, row.metric))


def test_a_run_reads_back_as_training_logged_it(tmp_path: Path) -> None:
    """Configuration, summary, last and best epoch, no stop reason, finished; every batch value
    with its weight and global step, every epoch value: equal to what the loggers were given."""
    memory = InMemoryMetricLogger()
    result = train(tmp_path / "run", memory=memory)
    run = load(tmp_path / "run")
    assert isinstance(run, Run) and run.name == "run"
    assert run.config == json.loads((tmp_path / "run" / "config.json").read_text())
    assert run.config["directions"] == {"Loss": "lowest"}
    assert run.summary == result.summary
    assert (run.last_epoch, run.best_epoch) == (result.last_epoch, result.best_epoch) == (3, 3)
    assert (run.stop_reason, run.finished, run.failed) == (None, True, False)
    assert run.rows("item") == by_place(logged_rows(memory, "run", final=False))
    assert run.rows() == by_place(logged_rows(memory, "run", final=True))
    assert run.values("valid", "Loss") == result.values("valid", "Loss")
    assert [row.step for row in run.rows("item") if row.split == "train"][:3] == [1, 2, 3]
    assert run.metrics() == run.metrics("valid") == ["Loss"]
    assert result.summary is not None
    assert run.summary_from_logs() == LearnerSummary(3, result.summary.metrics)


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    accumulation=st.integers(1, 3),
    every=st.integers(1, 4),
    max_steps=st.integers(2, 9),
    items=st.integers(5, 17),
)
def test_step_runs_read_back_with_every_global_step(
    tmp_path_factory: pytest.TempPathFactory,
    accumulation: int,
    every: int,
    max_steps: int,
    items: int,
) -> None:
    """A step run (max_steps, validate_every(steps), accumulation, passes crossing rounds):
    each batch row has the step the loggers were given, the epoch values theirs."""
    directory = tmp_path_factory.mktemp("step") / "run"
    memory = InMemoryMetricLogger()
    torch.manual_seed(0)
    model = TinyRegressor()
    (
        quiet(directory, loader(items, batch_size=3, shuffle=2), loader(4, seed=1))
        .metrics(LossMetric())
        .max_steps(max_steps)
        .validate_every(steps=every)
        .grads_accumulation(accumulation)
        .with_metric_logger(memory)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.01)))
    )
    run = load(directory)
    assert run.rows("item") == by_place(logged_rows(memory, "run", final=False))
    assert run.rows() == by_place(logged_rows(memory, "run", final=True))
    assert run.last_epoch == max(row.epoch for row in run.rows())


def test_a_resumed_run_reads_back_as_one_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped inside epoch 2 (a mid-round checkpoint, logs cut back on resume) and resumed:
    the rows, steps included, equal an uninterrupted run's, no step twice; meanwhile the
    stopped run reads back as not finished, with its stop reason and last complete epoch."""
    train(tmp_path / "full")
    stopped = train(tmp_path / "chain", stop_at_batch=5)  # epoch 2's second of 3 batches
    assert stopped.stop_reason == "stopped by the test"
    partial = load(tmp_path / "chain")
    assert (partial.last_epoch, partial.stop_reason, partial.finished) == (
        stopped.last_epoch,
        "stopped by the test",
        False,
    )
    train(tmp_path / "chain", configure=lambda builder: builder.resume_latest())
    full, chain = load([tmp_path / "full", tmp_path / "chain"])
    strip = [(r.split, r.epoch, r.step, r.metric, r.value, r.weight) for r in chain.rows("item")]
    assert strip == [
        (r.split, r.epoch, r.step, r.metric, r.value, r.weight) for r in full.rows("item")
    ]
    train_steps = [(r.epoch, r.step) for r in chain.rows("item") if r.split == "train"]
    assert len(set(train_steps)) == len(train_steps) == 9
    assert (chain.last_epoch, chain.stop_reason, chain.finished) == (3, None, True)


def test_a_run_being_written_reads_complete_lines_only(tmp_path: Path) -> None:
    """A line still being written (no newline yet), in a metric log or in the steps file, is
    not read; the split without its epoch value yet gives the mean of its batches so far."""
    train(tmp_path / "run", epochs=1)
    epoch_dir = tmp_path / "run" / "train" / "epoch-2"
    epoch_dir.mkdir()
    (epoch_dir / "Loss.log").write_text("2,1\n4,1\n0.12", encoding="utf-8")
    with (tmp_path / "run" / "train" / "steps.jsonl").open("a", encoding="utf-8") as steps:
        steps.write('["epoch",2]\n["step","Loss"]\n[4,1]\n[5,1]\n[6')
    run = load(tmp_path / "run")
    items = [(r.epoch, r.step, r.value) for r in run.rows("item") if r.epoch == 2]
    assert items == [(2, 4, 2.0), (2, 5, 4.0)]
    assert [(r.epoch, r.value) for r in run.rows() if r.split == "train"][-1] == (2, 3.0)
    assert run.last_epoch == 1  # epoch 2 has not validated


def test_text_metrics_are_left_out_and_a_broken_line_is_named(tmp_path: Path) -> None:
    """A log of text is not a numeric metric; a numeric log with a broken line later on is an
    error naming the file and the line."""
    train(tmp_path / "run", epochs=1)
    epoch_dir = tmp_path / "run" / "valid" / "epoch-1"
    (epoch_dir / "Cuda.log").write_text("unavailable\n", encoding="utf-8")
    assert load(tmp_path / "run").metrics() == ["Loss"]
    with (epoch_dir / "Loss.log").open("a", encoding="utf-8") as file:
        file.write("oops\n")
    with pytest.raises(ValueError, match=r"Loss\.log:\d+: not a numeric metric entry: 'oops'"):
        load(tmp_path / "run").rows()


def test_several_runs_by_list_and_pattern_with_names_of_their_own(tmp_path: Path) -> None:
    """A list of directories and patterns loads each run once, in order, each named by as much
    of its path as tells it apart; a pattern alone is refused with the way to write it."""
    for name in ("a/lr-1", "b/lr-1", "b/lr-2"):
        train(tmp_path / name, epochs=1)
    runs = load([tmp_path / "a" / "lr-1", str(tmp_path / "b" / "*")])
    assert isinstance(runs, Runs) and len(runs) == 3
    assert [run.name for run in runs] == ["a/lr-1", "b/lr-1", "b/lr-2"]
    assert {row.run for row in runs.rows()} == {"a/lr-1", "b/lr-1", "b/lr-2"}
    assert isinstance(runs[1:], Runs) and len(runs[1:]) == 2
    with pytest.raises(FileNotFoundError, match=r"give it in a list: load\(\["):
        load(str(tmp_path / "b" / "*"))
    with pytest.raises(FileNotFoundError, match="no run directory matches the pattern"):
        load([str(tmp_path / "c" / "*")])
    with pytest.raises(FileNotFoundError, match="no training run in"):
        load(tmp_path / "a")


def test_to_pandas_has_one_row_per_value(tmp_path: Path) -> None:
    """to_pandas: the rows' columns and values, step a nullable integer; several runs in one
    frame told apart by ``run``."""
    pandas = pytest.importorskip("pandas")
    train(tmp_path / "a", epochs=2)
    train(tmp_path / "b", epochs=2, lr=0.01)
    runs = load([tmp_path / "a", tmp_path / "b"])
    frame = runs.to_pandas("item")
    assert list(frame.columns) == ["run", "split", "epoch", "step", "metric", "value", "weight"]
    assert str(frame["step"].dtype) == "Int64" and len(frame) == len(runs.rows("item"))
    assert frame["value"].tolist() == [row.value for row in runs.rows("item")]
    epochs = runs[0].to_pandas()
    valid = epochs[epochs.split == "valid"].set_index("epoch")["value"].to_dict()
    assert valid == runs[0].values("valid", "Loss")
    assert pandas.isna(runs[0].to_pandas()["weight"]).all()


def test_to_pandas_without_pandas_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without pandas, to_pandas says what to install; rows() works without it."""
    train(tmp_path / "run", epochs=1)
    monkeypatch.setitem(sys.modules, "pandas", None)
    run = load(tmp_path / "run")
    assert run.rows()
    with pytest.raises(ImportError, match=r"pip install ember\[pandas\]"):
        run.to_pandas()


def test_the_steps_file_has_a_section_per_epoch_and_a_re_run_epoch_starts_its_section_anew(
    tmp_path: Path,
) -> None:
    """One steps file per split, a section per epoch; a run resumed from an earlier checkpoint
    (epoch 3 on disk already, from a run that went on) cuts the file back before epoch 3's
    section, so its bytes and steps equal an uninterrupted run's."""
    train(tmp_path / "full")
    train(tmp_path / "again")
    steps = tmp_path / "again" / "train" / "steps.jsonl"
    sections = [line for line in steps.read_text().splitlines() if line.startswith('["epoch"')]
    assert sections == ['["epoch",1]', '["epoch",2]', '["epoch",3]']
    assert not list((tmp_path / "again" / "train").glob("epoch-*/steps.jsonl"))
    train(tmp_path / "again", configure=lambda builder: builder.checkpoint(2))
    for split in ("train", "valid"):
        ours = (tmp_path / "again" / split / "steps.jsonl").read_bytes()
        assert ours == (tmp_path / "full" / split / "steps.jsonl").read_bytes()
    assert [(r.epoch, r.step) for r in load(tmp_path / "again").rows("item")] == [
        (r.epoch, r.step) for r in load(tmp_path / "full").rows("item")
    ]


@pytest.mark.parametrize("unfinished", ['["epo', '["epoch",', '["epoch",3', "[7,"])
def test_a_line_a_crash_left_unfinished_in_the_steps_file_is_cut_by_the_next_launch(
    tmp_path: Path, unfinished: str
) -> None:
    """The steps file ends in half a line (a crash while epoch 3 was written, after the
    checkpoint of epoch 2): the resumed run starts epoch 3's section on a line of its own."""
    train(tmp_path / "full")
    train(tmp_path / "cut", epochs=2)
    with (tmp_path / "cut" / "train" / "steps.jsonl").open("a", encoding="utf-8") as steps:
        steps.write(unfinished)
    train(tmp_path / "cut", configure=lambda builder: builder.resume_latest())
    for split in ("train", "valid"):
        ours = (tmp_path / "cut" / split / "steps.jsonl").read_bytes()
        assert ours == (tmp_path / "full" / split / "steps.jsonl").read_bytes()
