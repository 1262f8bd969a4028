"""A real notebook in a real Jupyter kernel (nbclient): the training cell runs, runs again
unchanged (versioned run directories), is interrupted mid-epoch by the kernel's interrupt, and the
next cell resumes it exactly; progress is one display updated in place."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from ember.train import load_checkpoint
from tests.train.fixtures import TinyRegressor, read_lines

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

REPOSITORY = Path(__file__).resolve().parents[2]
PAUSE_AT = 21  # the optimizer steps before the paused one: epoch 2 of 16 steps, its 6th batch

SETUP = """
import time
from pathlib import Path

import torch

from ember.train import Learner, LossMetric, SupervisedTraining, current_step
from tests.train.fixtures import TinyRegressor, loader

RUNS, SIGNAL = Path({runs!r}), Path({signal!r})
PAUSE_AT = None  # the optimizer step at which a training waits for the kernel's interrupt


def learner():
    torch.manual_seed(0)
    model = TinyRegressor()
    model.on_train_step = pause
    return Learner(model, torch.optim.SGD(model.parameters(), lr=0.05), 0.05)


def pause(batch):
    # at step PAUSE_AT: tell the test (SIGNAL), then wait until the interrupt stops the run
    if PAUSE_AT is None or current_step().optimizer_steps != PAUSE_AT:
        return
    SIGNAL.write_text("mid-epoch")
    while not builder.interrupter().should_stop():  # set by the kernel's SIGINT
        time.sleep(0.01)


def training():
    return (
        SupervisedTraining(RUNS, loader(64, shuffle=3), loader(16, seed=1))
        .metrics(LossMetric())
        .num_epochs(3)
        .with_default_checkpointers()
        .versioned()
    )
"""
TRAIN = """
builder = training()
result = builder.launch(learner())
print(result.directory.name, result.last_epoch, result.stop_reason)
"""
ARM = f"PAUSE_AT = {PAUSE_AT}"
RESUME = """
PAUSE_AT = None
builder = training().resume_latest()
result = builder.launch(learner())
print(result.directory.name, result.last_epoch, result.stop_reason)
"""


def text_of(outputs: list[Any]) -> str:
    return "".join(
        output.get("text", "") for output in outputs if output["output_type"] == "stream"
    )


def displays(outputs: list[Any]) -> list[Any]:
    return [output for output in outputs if output["output_type"] == "display_data"]


async def run_notebook(notebook: Any, signal: Path, checkpoints: Path) -> list[list[Any]]:
    """Setup; the training cell twice; armed, the training cell again, interrupted once it is
    mid-epoch; the resume. Returns each execution's outputs, and before the resume's the
    interrupted run's step checkpoints (``checkpoints/step-N``) as if an output."""
    client = nbclient.NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": REPOSITORY}}
    )
    setup, train, arm, resume = notebook.cells
    outputs: list[list[Any]] = []
    async with client.async_setup_kernel():
        for cell, index in ((setup, 0), (train, 1), (train, 1), (arm, 2)):
            await client.async_execute_cell(cell, index)
            outputs.append(copy.deepcopy(cell.outputs))
        running = asyncio.ensure_future(client.async_execute_cell(train, 1))
        while not signal.exists():  # the training is paused mid-epoch: no race with its end
            if running.done():
                running.result()  # the cell ended without pausing: its error, or the assert below
                raise AssertionError("the training cell ended before it paused")
            await asyncio.sleep(0.05)
        await client.km.interrupt_kernel()
        await running
        outputs.append(copy.deepcopy(train.outputs))
        outputs.append(sorted(path.name for path in checkpoints.glob("step-*")))
        await client.async_execute_cell(resume, 3)
        outputs.append(copy.deepcopy(resume.outputs))
    return outputs


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # jupyter_core's and zmq's own
def test_a_training_cell_reruns_stops_on_interrupt_and_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel chooses the notebook's display (one output, updated in place, no line per
    progress); the cell's second run goes to version_1; interrupted at step 22 it stops there
    with a mid-round checkpoint; the resume ends with the weights and logs of the
    uninterrupted run."""
    monkeypatch.delenv("EMBER_RENDERER", raising=False)  # the kernel picks its renderer
    runs, signal = tmp_path / "runs", tmp_path / "paused"
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(SETUP.format(runs=str(runs), signal=str(signal))),
        nbformat.v4.new_code_cell(TRAIN),
        nbformat.v4.new_code_cell(ARM),
        nbformat.v4.new_code_cell(RESUME),
    ]
    checkpoints = runs / "version_2" / "checkpoint"
    executions = asyncio.run(run_notebook(notebook, signal, checkpoints))
    _, first, second, _, interrupted, steps, resumed = executions

    for outputs in (first, second):
        (shown,) = displays(outputs)  # one display: every frame replaced it
        assert "Mode : Finished" in shown["data"]["text/plain"]
        assert "Epochs : 3/3" in shown["data"]["text/plain"]
        assert "<pre" in shown["data"]["text/html"]
        assert "Starting split" not in text_of(outputs)  # not the CLI renderer's lines
        assert "Training ended after 3 of 3 epochs." in text_of(outputs)
    assert text_of(first).endswith("version_0 3 None\n")
    assert text_of(second).endswith("version_1 3 None\n")

    stopped = text_of(interrupted)
    assert "Training stopped after 1 of 3 epochs: received SIGINT" in stopped
    assert stopped.endswith("version_2 1 received SIGINT: stopped after the current step\n")
    (shown,) = displays(interrupted)
    assert "Stopping : received SIGINT" in shown["data"]["text/plain"]
    assert steps == [f"step-{PAUSE_AT + 1}"]  # stopped after the paused step, checkpointed there

    assert text_of(resumed).endswith("version_2 3 None\n")
    assert sorted(path.name for path in runs.iterdir()) == ["version_0", "version_1", "version_2"]
    whole, again = (
        load_checkpoint(runs / v, "last", into=TinyRegressor()) for v in ("version_0", "version_2")
    )
    for (name, expected), actual in zip(
        whole.state_dict().items(), again.state_dict().values(), strict=True
    ):
        assert torch.equal(actual, expected), name
    for split in ("train", "valid"):
        log = Path(split, "epoch-2", "Loss.log")
        assert read_lines(runs / "version_2" / log) == read_lines(runs / "version_0" / log)
