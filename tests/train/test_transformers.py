"""Hugging Face models: a GPT-2 built from a config trains with no wrapper, its metrics agree
with its own loss to the last bit, and a run exports to a directory ``from_pretrained`` loads,
with its generation configuration and a tokenizer.

Nothing is downloaded: the models are randomly initialised from small configs, the tokenizer is
trained on a few sentences here."""

from __future__ import annotations

import importlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from ember import CheckpointError
from ember.app.cli import main as ember_main
from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.extend import AccuracyInput, LossInput, PerplexityInput, adapt
from ember.train import (
    AccuracyMetric,
    CausalLMOutput,
    CliMetricsRenderer,
    Learner,
    LossMetric,
    PerplexityMetric,
    SupervisedTraining,
    export_pretrained,
    load_checkpoint,
)
from ember.train._checkpoint.record import TRANSFORMERS_GENERATION_CONFIG, model_record
from ember.train._metric.base import MetricMetadata
from tests.train.fixtures import read_lines

transformers = pytest.importorskip("transformers")
from transformers.loss.loss_utils import ForCausalLMLoss  # noqa: E402

VOCAB = 48
Block = dict[str, torch.Tensor]


def gpt2(dropout: float = 0.1) -> Any:
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=16,
        n_embd=16,
        n_layer=1,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
    )
    return transformers.GPT2LMHeadModel(config)


def blocks(count: int, seed: int) -> list[Block]:
    """Sequences of 12 tokens; the first 3 labels of each are -100 (a prompt left out)."""
    ids = torch.randint(1, VOCAB, (count, 12), generator=torch.Generator().manual_seed(seed))
    labels = ids.clone()
    labels[:, :3] = -100
    return [{"input_ids": i, "labels": label} for i, label in zip(ids, labels, strict=True)]


def loaders() -> tuple[DataLoader[Block], DataLoader[Block]]:
    return (
        DataLoaderBuilder().batch_size(4).shuffle(1).build(InMemDataset(blocks(16, 0))),
        DataLoaderBuilder().batch_size(4).build(InMemDataset(blocks(8, 1))),
    )


def tokens(labels: torch.Tensor) -> int:
    """The labels the model's loss counts: each sequence's next tokens that are not -100."""
    return int((labels[:, 1:] != -100).sum())


def test_gpt2_trains_with_no_wrapper_and_logs_its_own_loss_bit_for_bit(tmp_path: Path) -> None:
    """Under bf16 autocast and accumulation of 2 batches, the logged Loss of each batch is the
    model's own loss, Perplexity is exp of the same negative log-likelihood summed over the
    same tokens (its mean is the loss to the last bit), token Accuracy counts those tokens,
    and the weights are those of a raw loop."""
    model = gpt2()
    train, valid = loaders()
    torch.manual_seed(5)
    result = (
        SupervisedTraining(tmp_path, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric(), PerplexityMetric(), AccuracyMetric())
        .precision("bf16-mixed")
        .grads_accumulation(2)
        .num_epochs(2)
        .launch(Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-2)))
    )
    assert result.error is None, result.traceback
    raw = gpt2()
    optim = torch.optim.AdamW(raw.parameters(), lr=1e-2)
    train, _ = loaders()
    torch.manual_seed(5)
    expected: list[tuple[str, str, str]] = []
    for _ in range(2):
        raw.train()
        for index, batch in enumerate(train, 1):
            with torch.autocast("cpu", torch.bfloat16):
                out = raw(**batch)
            out.loss.backward()
            logits, labels = (
                out.logits.float().flatten(0, 1),
                F.pad(batch["labels"], (0, 1), value=-100),
            )
            nll = F.cross_entropy(logits, labels[:, 1:].flatten(), reduction="sum")
            count = tokens(batch["labels"])
            assert np.float32(nll.item() / count) == np.float32(out.loss.item())
            correct = (logits.argmax(1) == labels[:, 1:].flatten())[labels[:, 1:].flatten() != -100]
            expected.append(
                (
                    f"{out.loss.item()!r},{len(batch['labels'])}",
                    f"{math.exp(nll.item() / count)!r},{count}",
                    f"{100.0 * int(correct.sum()) / count!r},{count}",
                )
            )
            if index % 2 == 0:
                optim.step()
                optim.zero_grad(set_to_none=True)
        raw.eval()
        with torch.no_grad():
            for batch in valid:
                with torch.autocast("cpu", torch.bfloat16):
                    raw(**batch)
    logged = list(
        zip(
            *(
                [
                    line
                    for epoch in (1, 2)
                    for line in read_lines(tmp_path / "train" / f"epoch-{epoch}" / f"{name}.log")[
                        :-1
                    ]
                ]
                for name in ("Loss", "Perplexity", "Accuracy")
            ),
            strict=True,
        )
    )
    assert [
        tuple(f"{float(v.split(',')[0])!r},{v.split(',')[1]}" for v in row) for row in logged
    ] == [tuple(f"{float(v.split(',')[0])!r},{v.split(',')[1]}" for v in row) for row in expected]
    assert result.model is model
    for ours, theirs in zip(model.state_dict().values(), raw.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs)


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 4),
    length=st.integers(2, 9),
    vocab=st.integers(2, 40),
    ignored=st.floats(0.0, 0.9),
    seed=st.integers(0, 2**16),
)
def test_causal_lm_metrics_count_what_transformers_loss_counts(
    batch: int, length: int, vocab: int, ignored: float, seed: int
) -> None:
    """For any logits and labels (some -100), the Perplexity metric's negative log-likelihood
    over its tokens is transformers' ForCausalLMLoss to the last bit, and Accuracy and the
    loss count the same tokens."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=generator)
    labels = torch.randint(0, vocab, (batch, length), generator=generator)
    labels[torch.rand(batch, length, generator=generator) < ignored] = -100
    loss = ForCausalLMLoss(logits, labels, vocab)
    output = CausalLMOutput(loss, logits, labels)
    assert adapt(output, LossInput).tensor is loss
    counted = tokens(labels)
    metric = PerplexityMetric()
    entry = metric.update(adapt(output, PerplexityInput), MetricMetadata(None, 1, None))  # type: ignore[arg-type]
    value, weight = (float(part) for part in entry.serialized.split(","))
    assert weight == counted
    if counted:
        state = metric.state_dict()
        mean = state["numerator"] / state["denominator"]
        assert np.float32(mean) == np.float32(loss.item())
        assert value == math.exp(mean)
    assert len(adapt(output, AccuracyInput).targets) == counted


def test_a_run_exports_to_a_directory_from_pretrained_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ember export --format hf writes config.json, generation_config.json and
    model.safetensors (no pickle), which from_pretrained loads into the trained weights and the
    model's generation configuration; an existing non-empty directory, a file,
    a path inside checkpoint/ and a run of a model that is not a transformers model are
    refused, nothing written."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = gpt2(dropout=0.0)
    train, valid = loaders()
    run = tmp_path / "run"
    result = (
        SupervisedTraining(run, train, valid)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .with_default_checkpointers()
        .launch(Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-2)))
    )
    assert result.error is None, result.traceback
    assert ember_main(["export", "--format", "hf", str(run), "-o", str(tmp_path / "hf")]) == 0
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert type(loaded) is type(model)
    assert loaded.generation_config == model.generation_config
    for ours, theirs in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(ours, theirs)
    ids = blocks(2, 3)[0]["input_ids"][None]
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_pretrained(run, empty, "last") == 1
    (tmp_path / "file").write_text("mine")
    refused = [
        (tmp_path / "hf", "is a directory that is not empty"),
        (tmp_path / "file", "exists and is a regular file, not a directory"),
        (run / "checkpoint" / "hf", "is inside the checkpoint directory"),
    ]
    for target, message in refused:
        with pytest.raises(ValueError, match=message):
            export_pretrained(run, target)
    assert (tmp_path / "file").read_text() == "mine"
    assert not (run / "checkpoint" / "hf").exists()
    assert ember_main(["export", "--format", "hf", str(run), "-o", str(tmp_path / "hf")]) == 2


def test_a_run_of_another_model_is_refused_naming_the_plain_export(tmp_path: Path) -> None:
    """Checkpoints of a model that is not a transformers model hold no configuration."""
    model = torch.nn.Linear(3, 1)
    samples = [(torch.randn(3), torch.randn(1)) for _ in range(8)]
    learner = Learner(model, torch.optim.SGD(model.parameters(), lr=0.1), loss=F.mse_loss)
    train = DataLoaderBuilder().batch_size(4).build(InMemDataset(samples))
    checkpointed_run(tmp_path / "run", learner, train)
    with pytest.raises(CheckpointError, match=r"not a transformers model.*ember export RUN -o"):
        export_pretrained(tmp_path / "run", tmp_path / "hf", "last")
    assert not (tmp_path / "hf").exists()


def test_the_gpt2_example_trains_in_steps_and_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/gpt2 in miniature: bf16, accumulation averaged as transformers.Trainer does
    (mean=True, what an HF user copying it expects), clipping, warm-up and cosine, validation
    and checkpoints every 2 steps; the export loads with from_pretrained."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("EMBER_RENDERER", "cli")
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "examples"))
    example = importlib.import_module("gpt2")
    tiny = ["--chars", "3000", "--context", "16", "--batch", "4", "--width", "16", "--layers", "1"]
    result = example.main(["--steps", "4", "--every", "2", "--dir", str(tmp_path / "run"), *tiny])
    assert result.error is None, result.traceback
    assert result.last_epoch == 2
    config = json.loads((tmp_path / "run" / "config.json").read_text(encoding="utf-8"))
    assert config["grads_accumulation"] == 2 and config["mean_accumulation"] is True
    assert read_lines(tmp_path / "run" / "valid" / "epoch-2" / "Perplexity.log")[-1].endswith(
        ",final"
    )
    export_pretrained(tmp_path / "run", tmp_path / "hf", "last")
    loaded = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf")
    for ours, theirs in zip(
        result.model.state_dict().values(), loaded.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs)


SENTENCES = ["the cat sat on the mat", "a dog ate the bone", "the bird sang a song to the cat"]


def word_tokenizer() -> Any:
    """A word-level tokenizer trained on SENTENCES (nothing downloaded), wrapped as transformers
    wraps a tokenizers one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    words = Tokenizer(models.WordLevel(unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    words.train_from_iterator(
        SENTENCES, trainers.WordLevelTrainer(special_tokens=["<unk>", "<eos>"])
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>"
    )


def generating_gpt2(tokenizer: Any) -> Any:
    """gpt2() with generation settings a user gives it, which config.json does not hold."""
    model = gpt2(dropout=0.0)
    model.generation_config.max_new_tokens = 6
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def checkpointed_run(run: Path, learner: Learner[Any], *loaders: Any, epochs: int = 1) -> Any:
    """``epochs`` of ``learner`` on the train (and valid) loader with the default checkpointers;
    the result."""
    result = (
        SupervisedTraining(run, *loaders)
        .renderer(CliMetricsRenderer(io.StringIO()))
        .metrics(LossMetric())
        .num_epochs(epochs)
        .with_default_checkpointers()
        .launch(learner)
    )
    assert result.error is None, result.traceback
    return result


def two_epochs(run: Path, model: Any) -> Any:
    """Two epochs of ``model`` (AdamW) on the GPT-2 blocks, checkpointed; the result."""
    learner = Learner(model, torch.optim.AdamW(model.parameters(), lr=1e-2))
    return checkpointed_run(run, learner, *loaders(), epochs=2)


def test_an_export_with_its_tokenizer_round_trips_through_from_pretrained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """export_pretrained(..., tokenizer=...) writes the tokenizer beside the weights and the
    generation_config the user set on the model: AutoModelForCausalLM, AutoTokenizer and
    GenerationConfig load them from the directory alone; the weights are the checkpoint's,
    any text encodes to the same ids, and generate() gives what the trained model gives."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = word_tokenizer()
    model = generating_gpt2(tokenizer)
    run = tmp_path / "run"
    two_epochs(run, model)
    out = tmp_path / "hf"
    assert export_pretrained(run, out, "last", tokenizer=tokenizer) == 2
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()
    }
    loaded = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    checkpoint = load_checkpoint(run, 2, into=gpt2())
    for ours, theirs in zip(
        checkpoint.state_dict().values(), loaded.state_dict().values(), strict=True
    ):
        assert torch.equal(ours, theirs)
    assert transformers.GenerationConfig.from_pretrained(out) == model.generation_config
    assert loaded.generation_config == model.generation_config
    assert loaded.generation_config.max_new_tokens == 6
    reloaded = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)

    @settings(max_examples=50, deadline=None)
    @given(
        st.lists(
            st.one_of(st.sampled_from(" ".join(SENTENCES).split()), st.text(max_size=8)),
            max_size=12,
        ).map(" ".join)
    )
    def encodes_alike(text: str) -> None:
        assert reloaded(text)["input_ids"] == tokenizer(text)["input_ids"]
        assert reloaded.decode(reloaded(text)["input_ids"]) == tokenizer.decode(
            tokenizer(text)["input_ids"]
        )

    encodes_alike()
    prompt = reloaded("the cat sat", return_tensors="pt")
    model.eval()
    with torch.no_grad():
        generated = loaded.generate(**prompt)
        assert torch.equal(generated, model.generate(**prompt))
    assert generated.shape[1] > prompt["input_ids"].shape[1]
    assert reloaded.decode(generated[0]).startswith("the cat sat")


def test_the_cli_exports_a_saved_tokenizer_and_names_a_bad_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ember export --format hf RUN -o DIR --tokenizer TOKDIR writes TOKDIR's tokenizer into
    DIR; a missing path, a file, a directory holding no tokenizer and --tokenizer without
    --format hf exit 2 naming the problem, writing nothing."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer = word_tokenizer()
    run = tmp_path / "run"
    two_epochs(run, generating_gpt2(tokenizer))
    saved = tmp_path / "tokenizer"
    tokenizer.save_pretrained(saved)
    out = tmp_path / "hf"
    command = ["export", "--format", "hf", str(run), "-o", str(out)]
    assert ember_main([*command, "--tokenizer", str(saved)]) == 0
    assert "with the tokenizer of" in capsys.readouterr().out
    reloaded = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert reloaded(SENTENCES[2])["input_ids"] == tokenizer(SENTENCES[2])["input_ids"]
    (tmp_path / "file").write_text("mine")
    (tmp_path / "empty").mkdir()
    refused = [
        (["--tokenizer", str(tmp_path / "missing")], "is not a directory"),
        (["--tokenizer", str(tmp_path / "file")], "is not a directory"),
        (["--tokenizer", str(tmp_path / "empty")], "holds no tokenizer"),
    ]
    other = tmp_path / "other"
    for extra, message in refused:
        assert ember_main([*command[:-1], str(other), *extra]) == 2
        assert message in capsys.readouterr().err
    assert ember_main(["export", str(run), "-o", str(tmp_path / "w"), "--tokenizer", str(saved)])
    assert "--tokenizer goes with --format hf" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "empty",
        "file",
        "hf",
        "run",
        "tokenizer",
    ]
    with pytest.raises(TypeError, match="tokenizer must be a transformers tokenizer"):
        export_pretrained(run, other, tokenizer=3)  # type: ignore[arg-type]  # the mistake


_STALLED_EXPORT = """
import os, sys
from ember.train import export_pretrained
from transformers import AutoTokenizer

run, out, saved, point = sys.argv[1:]
tokenizer = AutoTokenizer.from_pretrained(saved, local_files_only=True)


def stall():
    print("stalled", flush=True)
    sys.stdin.readline()  # killed here


save_tokenizer, rename = tokenizer.save_pretrained, os.replace
if point == "tokenizer":
    tokenizer.save_pretrained = lambda directory: (save_tokenizer(directory), stall())
else:
    os.replace = lambda src, dst: (stall(), rename(src, dst))
export_pretrained(run, out, tokenizer=tokenizer)
"""


@pytest.mark.parametrize("point", ["tokenizer", "rename"])
def test_an_export_killed_midway_leaves_the_empty_directory_as_it_was(
    tmp_path: Path, point: str
) -> None:
    """An export killed (SIGKILL) once the tokenizer is written, or with every file written
    just before the rename, leaves the empty output directory empty: the tokenizer files and
    generation_config.json are part of the one directory swap; a second export then succeeds."""
    tokenizer = word_tokenizer()
    run = tmp_path / "run"
    two_epochs(run, generating_gpt2(tokenizer))
    saved = tmp_path / "tokenizer"
    tokenizer.save_pretrained(saved)
    out = tmp_path / "exports" / "hf"
    out.mkdir(parents=True)
    with subprocess.Popen(
        [sys.executable, "-c", _STALLED_EXPORT, str(run), str(out), str(saved), point],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    ) as stalled:
        try:
            assert stalled.stdout is not None
            assert stalled.stdout.readline() == b"stalled\n"
            (temp,) = [p for p in out.parent.iterdir() if p != out]
            written = {p.name for p in temp.iterdir()}
            assert "tokenizer.json" in written
            if point == "rename":
                assert {"config.json", "generation_config.json", "model.safetensors"} <= written
        finally:
            stalled.kill()
    assert out.is_dir() and not any(out.iterdir())
    export_pretrained(run, out, tokenizer=saved)
    assert {"tokenizer.json", "generation_config.json"} <= {p.name for p in out.iterdir()}


def test_a_model_that_cannot_generate_exports_no_generation_config(tmp_path: Path) -> None:
    """A transformers model with no generation_config (a classifier) records none and its
    export holds none, as its save_pretrained writes none; a generative one records what
    its save_pretrained writes."""
    config = gpt2().config
    config.pad_token_id = 0
    classifier = transformers.GPT2ForSequenceClassification(config)
    assert TRANSFORMERS_GENERATION_CONFIG not in model_record(classifier).metadata
    samples = [{"input_ids": b["input_ids"], "labels": torch.tensor(1)} for b in blocks(8, 2)]
    learner = Learner(classifier, torch.optim.SGD(classifier.parameters(), lr=0.1))
    train = DataLoaderBuilder().batch_size(4).build(InMemDataset(samples))
    checkpointed_run(tmp_path / "run", learner, train)
    export_pretrained(tmp_path / "run", tmp_path / "hf", "last")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "model.safetensors",
    ]
    generative = gpt2()
    generative.generation_config.do_sample = True
    generative.generation_config.top_k = 3
    generative.save_pretrained(tmp_path / "saved")
    written = (tmp_path / "saved" / "generation_config.json").read_text(encoding="utf-8")
    assert model_record(generative).metadata[TRANSFORMERS_GENERATION_CONFIG] == json.loads(written)
