"""The training loop: event order, accumulation, the lr used, loss logs, stops, validation."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.extend import End, EndEpoch, EndSplit, ProcessedItem, Start, StartSplit
from ember.train import (
    GradientsParams,
    InMemoryMetricLogger,
    Interrupter,
    Learner,
    LearningRateMetric,
    LinearLr,
    LossMetric,
    SingleDevice,
    Split,
)
from tests.train.fixtures import (
    Batch,
    SpyProcessor,
    TinyRegressor,
    loader,
    quiet,
    read_lines,
    run_loop,
)


def shape(events: list[tuple[str, Any]]) -> list[tuple[str, str, int | None]]:
    out = []
    for split, event in events:
        number = getattr(event, "epoch", None)
        if isinstance(event, ProcessedItem):
            number = event.item.iteration
        out.append((split, type(event).__name__, number))
    return out


def test_event_order_matches_reference(model: TinyRegressor) -> None:
    """The loop emits Start, then StartSplit, items, EndSplit for train then valid, then
    EndEpoch, per epoch."""
    spy = SpyProcessor()
    learner = Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    result = run_loop(SingleDevice(), learner, loader(10, 4), loader(6, 4), spy, 2)
    expected: list[tuple[str, str, int | None]] = [("train", "Start", None)]
    for epoch in (1, 2):
        expected += [("train", "StartSplit", epoch)]
        expected += [("train", "ProcessedItem", i) for i in (1, 2, 3)]
        expected += [("train", "EndSplit", epoch), ("valid", "StartSplit", epoch)]
        expected += [("valid", "ProcessedItem", i) for i in (1, 2)]
        expected += [("valid", "EndSplit", epoch), ("train", "EndEpoch", epoch)]
    assert shape(spy.events) == expected
    assert result.last_round == 2 and result.stop_reason is None
    starts = [e for _, e in spy.events if isinstance(e, StartSplit)]
    assert [s.total_items for s in starts] == [10, 6, 10, 6]


class RecordingRegressor(TinyRegressor):
    """Records the gradients and lr of every optimizer step."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[dict[str, torch.Tensor], float]] = []

    def optimize(self, optim: torch.optim.Optimizer, lr: float, grads: GradientsParams) -> None:
        self.steps.append(({k: v.clone() for k, v in grads.items()}, optim.param_groups[0]["lr"]))
        super().optimize(optim, lr, grads)


def test_accumulation_window_3_over_7_batches() -> None:
    """Window 3 over 7 batches: 3 optimizer steps (3, 3, 1), each with the summed gradients."""
    torch.manual_seed(0)
    model = RecordingRegressor()
    reference = RecordingRegressor()
    reference.load_state_dict(model.state_dict())
    train = loader(28, 4)  # 7 batches
    batches = list(loader(28, 4))
    learner = Learner(model, torch.optim.SGD(model.parameters()), 0.05)
    run_loop(SingleDevice(), learner, train, loader(4, 4), SpyProcessor(), 1, grads_accumulation=3)
    assert len(model.steps) == 3

    optim = torch.optim.SGD(reference.parameters(), lr=0.05)
    for window, (grads, lr) in zip(
        [batches[0:3], batches[3:6], batches[6:7]], model.steps, strict=True
    ):
        summed: dict[str, torch.Tensor] = {}
        for batch in window:
            out = reference.train_step(batch)
            for name, grad in out.grads.items():
                summed[name] = summed[name] + grad if name in summed else grad
        assert summed.keys() == grads.keys()
        for name in summed:
            assert torch.equal(summed[name], grads[name]), name
        assert lr == 0.05
        GradientsParams(summed).assign_to(reference)
        optim.step()
        reference.zero_grad(set_to_none=True)


def test_a_stop_inside_a_window_trains_the_window_to_its_step() -> None:
    """A stop inside an accumulation window (no checkpointers) trains the window to its end
    and takes its optimizer step, as every stop does; then the run ends."""
    torch.manual_seed(0)
    model = RecordingRegressor()
    interrupter = Interrupter()
    seen = 0

    def stop_at_fifth(batch: Batch) -> None:
        nonlocal seen
        seen += 1
        if seen == 5:
            interrupter.stop("test")

    model.on_train_step = stop_at_fifth
    learner = Learner(model, torch.optim.SGD(model.parameters()), 0.05)
    result = run_loop(
        SingleDevice(),
        learner,
        loader(28, 4),
        loader(4, 4),
        SpyProcessor(),
        1,
        interrupter,
        grads_accumulation=3,
    )
    assert len(model.steps) == 2  # batches 1-3, then 4-6: the stop came at batch 5
    assert result.stop_reason == "test" and result.last_round == 0


def test_event_lr_is_the_lr_the_optimizer_used(run_dir: Path) -> None:
    """Each ProcessedItem's lr equals the param-group lr at that batch's optimizer step."""
    torch.manual_seed(0)
    model = RecordingRegressor()
    memory = InMemoryMetricLogger()
    result = (
        quiet(run_dir, loader(20, 4), loader(4, 4))
        .with_metric_logger(memory)
        .metric_train_numeric(LearningRateMetric())
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), LinearLr(0.1, 0.01, 6)))
    )
    assert result.error is None
    used = [lr for _, lr in model.steps]
    logged = [
        entry.value
        for epoch in (1, 2)
        for entry in memory.read_numeric("Learning Rate", epoch, Split.TRAIN)
        if not entry.final
    ]
    assert logged == used
    assert used[0] == pytest.approx(0.1) and used[-1] == pytest.approx(0.01)
    assert len(set(used)) > 5


def test_loss_log_lines_and_final_mean(model: TinyRegressor, run_dir: Path) -> None:
    """Loss.log has one 'value,items' line per batch and the per-item mean last
    (docs/design.md): 27 items in batches of 4, the last batch of 3 weighs 3."""
    result = (
        quiet(run_dir, loader(27, 4), loader(9, 4))
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
    )
    assert result.error is None
    lines = read_lines(run_dir / "train" / "epoch-1" / "Loss.log")
    assert len(lines) == 8
    values = [float(line.split(",")[0]) for line in lines[:-1]]
    weights = [int(line.split(",")[1]) for line in lines[:-1]]
    assert weights == [4] * 6 + [3]
    assert lines[-1].endswith(",final")
    per_item = sum(v * n for v, n in zip(values, weights, strict=True)) / 27
    assert float(lines[-1].split(",")[0]) == pytest.approx(per_item, rel=1e-12)
    assert len(read_lines(run_dir / "valid" / "epoch-1" / "Loss.log")) == 4


def test_per_sample_loss_weights_by_elements(run_dir: Path) -> None:
    """A loss with one value per sample weighs each batch by its number of samples."""

    class PerSample(TinyRegressor):
        def train_step(self, batch: Batch) -> Any:
            out = self.regression(batch)
            per_sample = (self(batch.x) - batch.y).pow(2).squeeze(1)
            from ember.train import RegressionOutput, TrainOutput

            item = RegressionOutput(per_sample.detach(), out.output, out.targets)
            return TrainOutput.from_loss(self, out.loss, item)

    torch.manual_seed(0)
    model = PerSample()
    quiet(run_dir, loader(10, 4), loader(4, 4)).metric_train_numeric(LossMetric()).launch(
        Learner(model, torch.optim.SGD(model.parameters()), 0.0)
    )
    lines = read_lines(run_dir / "train" / "epoch-1" / "Loss.log")
    assert [line.split(",")[1] for line in lines] == ["4", "4", "2", "final"]


def test_stop_during_train_skips_validation(model: TinyRegressor) -> None:
    """A stop in the training split: no validation, no EndEpoch, the reason is returned; the
    processor is flushed before "Training interrupted" is logged, so the log keeps its order."""
    spy = SpyProcessor()
    interrupter = Interrupter()
    model.on_train_step = lambda batch: interrupter.stop("enough")
    learner = Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    result = run_loop(SingleDevice(), learner, loader(8), loader(4), spy, 3, interrupter)
    assert shape(spy.events) == [
        ("train", "Start", None),
        ("train", "StartSplit", 1),
        ("train", "ProcessedItem", 1),
        ("train", "EndSplit", 1),
        ("flush", "NoneType", None),
    ]
    assert result.stop_reason == "enough" and result.last_round == 0


def test_stop_during_valid_finishes_epoch_without_training_more(model: TinyRegressor) -> None:
    """A stop in validation completes that epoch, then trains no batch of the next one."""
    spy = SpyProcessor()
    interrupter = Interrupter()
    trained = 0

    def count(batch: Batch) -> None:
        nonlocal trained
        trained += 1

    class StopInValid(TinyRegressor):
        def inference_step(self, batch: Batch) -> Any:
            interrupter.stop("valid stop")
            return super().inference_step(batch)

    torch.manual_seed(0)
    model = StopInValid()
    model.on_train_step = count
    learner = Learner(model, torch.optim.SGD(model.parameters()), 0.1)
    result = run_loop(SingleDevice(), learner, loader(8), loader(8), spy, 3, interrupter)
    assert trained == 2
    assert shape(spy.events)[-2:] == [("train", "EndEpoch", 1), ("flush", "NoneType", None)]
    assert result.last_round == 1 and result.stop_reason == "valid stop"


def test_validation_runs_in_eval_mode_without_graph(run_dir: Path) -> None:
    """inference_step sees eval mode and no autograd; the returned model is in eval mode."""
    seen: list[tuple[bool, bool]] = []

    class Probe(TinyRegressor):
        def inference_step(self, batch: Batch) -> Any:
            seen.append((self.training, torch.is_grad_enabled()))
            return super().inference_step(batch)

    torch.manual_seed(0)
    model = Probe()
    result = (
        quiet(run_dir, loader(8), loader(8))
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert seen == [(False, False)] * 4
    assert result.model is model and not model.training


def test_training_thread_never_reads_outputs_back(
    model: TinyRegressor, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop reads no tensor back to the host: only the processor does. A run on the CPU
    processes its metrics on the training thread (nothing to wait for there); here it is made
    to use ``train-worker``, as a run on an accelerator does, so any read by the loop shows."""
    monkeypatch.setattr("ember.train._session._on_cpu", lambda run: False)
    main = threading.current_thread()
    offenders: list[str] = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__", "numpy"):
        original = getattr(torch.Tensor, name)

        def spy(self: torch.Tensor, *args: Any, _name: str = name, _orig: Any = original) -> Any:
            if threading.current_thread() is main:
                offenders.append(_name)
            return _orig(self, *args)

        monkeypatch.setattr(torch.Tensor, name, spy)
    train, valid = loader(16), loader(8)
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1)
    offenders.clear()
    result = (
        quiet(run_dir, train, valid)
        .metric_train_numeric(LossMetric())
        .metric_valid_numeric(LossMetric())
        .num_epochs(2)
        .launch(learner)
    )
    assert result.error is None
    assert offenders == []
    assert len(read_lines(run_dir / "train" / "epoch-2" / "Loss.log")) == 5


def test_end_event_carries_summary(model: TinyRegressor) -> None:
    """Events are frozen dataclasses."""
    event = End(None)
    with pytest.raises(AttributeError):
        event.summary = 1  # type: ignore[misc]
    different: tuple[object, object] = (EndEpoch(1), EndSplit(1))
    assert Start(3, 1) == Start(3, 1) and different[0] != different[1]


def test_a_run_on_the_cpu_processes_its_metrics_on_the_training_thread(
    model: TinyRegressor, run_dir: Path
) -> None:
    """On the CPU no output waits for a device, so no ``train-worker`` is started: every
    metric update runs on the training thread, and each batch still gets its line."""
    threads: set[str] = set()

    class ThreadLoss(LossMetric):
        def update(self, item: Any, metadata: Any) -> Any:
            threads.add(threading.current_thread().name)
            return super().update(item, metadata)

    workers: list[bool] = []
    model.on_train_step = lambda batch: workers.append(
        any(t.name == "train-worker" for t in threading.enumerate())
    )
    result = (
        quiet(run_dir, loader(16), loader(8))
        .metric_train_numeric(ThreadLoss())
        .metric_valid_numeric(ThreadLoss())
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), 0.1))
    )
    assert result.error is None
    assert threads == {threading.current_thread().name}
    assert workers == [False] * 8
    assert len(read_lines(run_dir / "train" / "epoch-2" / "Loss.log")) == 5
    assert len(read_lines(run_dir / "valid" / "epoch-2" / "Loss.log")) == 3
