"""The training loop over a streaming loader: the same steps as over the same items in order,
an accumulation window that closes on the pass's last batch, progress without a total."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from ember.data import DataLoaderBuilder
from ember.extend import StartSplit
from ember.train import (
    CliMetricsRenderer,
    Learner,
    LossMetric,
    SingleDevice,
    SupervisedTraining,
)
from tests.train.fixtures import SpyProcessor, TinyRegressor, batcher, loader, run_loop, samples


def stream(count: int, batch_size: int, workers: int = 0, shuffle: int | None = None) -> Any:
    items = samples(count)

    def read() -> Iterator[tuple[list[float], float]]:
        yield from items

    builder = DataLoaderBuilder(batcher).batch_size(batch_size).num_workers(workers)
    if shuffle is not None:
        builder.shuffle(shuffle, buffer_size=8)
    return builder.build(read)


def test_a_stream_trains_exactly_as_the_same_items_in_order() -> None:
    """7 streamed batches with accumulation 3 give the weights of the map-style loader over the
    same items (3 optimizer steps, the last one closed by the pass's last batch)."""
    weights = []
    for train in (loader(26, 4), stream(26, 4), stream(26, 4, workers=3)):
        torch.manual_seed(0)
        model = TinyRegressor()
        learner = Learner(model, torch.optim.SGD(model.parameters()), 0.05)
        spy = SpyProcessor()
        run_loop(SingleDevice(), learner, train, loader(4, 4), spy, 2, grads_accumulation=3)
        weights.append([p.detach().clone() for p in model.parameters()])
        starts = [event for _, event in spy.events if isinstance(event, StartSplit)]
        assert [s.total_items for s in starts][:2] == [train.num_items(), 4]
        train.close()
    for other in weights[1:]:
        assert all(torch.equal(a, b) for a, b in zip(weights[0], other, strict=True))


def test_a_launched_run_over_a_stream_renders_counts_and_finishes(
    model: TinyRegressor, run_dir: Path
) -> None:
    """SupervisedTraining over a streaming train loader runs, checkpoints and reports counts."""
    output = io.StringIO()
    result = (
        SupervisedTraining(run_dir, stream(10, 4), loader(4))
        .renderer(CliMetricsRenderer(output))
        .metric_train_numeric(LossMetric())
        .num_epochs(2)
        .launch(Learner(model, torch.optim.SGD(model.parameters()), 0.1))
    )
    assert result.error is None
    assert "Starting split 'train' with a stream of items." in output.getvalue()


def test_a_run_over_a_shuffled_stream_resumes_at_an_epoch_boundary_bit_identically(
    tmp_path: Path,
) -> None:
    """Stopping after epoch 1 and resuming from its checkpoint (the stream's state in it) ends
    with the weights of one uninterrupted 3-epoch run."""

    def run(directory: Path, epochs: int, resume: int | None = None) -> TinyRegressor:
        torch.manual_seed(0)
        model = TinyRegressor()
        builder = (
            SupervisedTraining(directory, stream(30, 4, workers=2, shuffle=3), loader(8))
            .renderer(CliMetricsRenderer(io.StringIO()))
            .metric_train_numeric(LossMetric())
            .with_default_checkpointers()
            .num_epochs(epochs)
        )
        if resume is not None:
            builder = builder.checkpoint(resume)
        result = builder.launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
        assert result.error is None, result.traceback
        return model

    full = run(tmp_path / "full", 3)
    run(tmp_path / "resumed", 1)
    resumed = run(tmp_path / "resumed", 3, resume=1)
    for a, b in zip(full.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(a, b)
