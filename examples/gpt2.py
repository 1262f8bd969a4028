"""GPT-2 from a config, trained with no wrapper: a ``transformers`` model computes its own loss.

``GPT2LMHeadModel`` (built from a small ``GPT2Config``, randomly initialised: nothing is
downloaded) takes a batch of ``{"input_ids", "labels"}`` and returns its loss:
``Learner(model, optimizer, schedule)`` trains ``model(**batch).loss`` as it is. The model is a
causal language model, so its metrics read a ``CausalLMOutput`` (told from the model, said in
``experiment.log``): ``Loss`` is the model's own loss, and ``Perplexity`` and token
``Accuracy`` count the tokens that loss counts (shifted, ``-100`` ignored). The run uses what a
``transformers.Trainer`` run would: bf16 autocast, gradient accumulation averaged over the
window (``mean=True``: the gradient of one ``--accumulate`` times larger batch, as Trainer's
``gradient_accumulation_steps`` gives it; ember's default sums, so ``clip_grad_norm(1.0)`` would
clip a gradient that many times larger), clipping, a linear warm-up then cosine decay
(``transformers``' own schedule), validation and checkpoints every ``--every`` optimizer steps.
The text is *Hamlet* (``examples/data/hamlet.md``), as bytes.

    python examples/gpt2.py --steps 200 --every 50
    ember export --format hf artifacts/gpt2 -o artifacts/gpt2-hf     # from_pretrained loads it

Needs ``pip install ember[hf]`` (``transformers``, which brings no torch of its own).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from ember.data import DataLoader, DataLoaderBuilder, InMemDataset
from ember.train import (
    AccuracyMetric,
    Learner,
    LearningResult,
    LossMetric,
    PerplexityMetric,
    SupervisedTraining,
)

TEXT = Path(__file__).resolve().parent / "data" / "hamlet.md"
Block = dict[str, torch.Tensor]


def blocks(ids: torch.Tensor, context: int) -> list[Block]:
    """Consecutive windows of ``context`` byte ids; the model shifts its labels itself."""
    windows = ids[: len(ids) // context * context].view(-1, context)
    return [{"input_ids": window, "labels": window} for window in windows]


def loaders(chars: int | None, context: int, batch: int) -> tuple[DataLoader[Block], ...]:
    """The first nine tenths of the text to train on (shuffled), the last tenth to validate."""
    ids = torch.tensor(list(TEXT.read_bytes()[:chars]), dtype=torch.long)
    split = len(ids) * 9 // 10
    train = (
        DataLoaderBuilder()
        .batch_size(batch)
        .shuffle(0)
        .build(InMemDataset(blocks(ids[:split], context)))
    )
    valid = DataLoaderBuilder().batch_size(batch).build(InMemDataset(blocks(ids[split:], context)))
    return train, valid


def gpt2(context: int, width: int, layers: int) -> Any:
    """A small GPT-2 over the 256 byte values, randomly initialised."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=256,
        n_positions=context,
        n_embd=width,
        n_layer=layers,
        n_head=4,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def main(argv: list[str] | None = None) -> LearningResult[Any]:
    """Train for ``--steps`` optimizer steps, validating and checkpointing every ``--every``."""
    from transformers import get_cosine_schedule_with_warmup

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps in all")
    parser.add_argument("--every", type=int, default=50, help="validate and checkpoint")
    parser.add_argument("--chars", type=int, default=None, help="use the first N bytes")
    parser.add_argument("--context", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--accumulate", type=int, default=2, help="batches per optimizer step")
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=Path("artifacts/gpt2"))
    args = parser.parse_args(argv)
    train, valid = loaders(args.chars, args.context, args.batch)
    torch.manual_seed(0)
    model = gpt2(args.context, args.width, args.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    schedule = get_cosine_schedule_with_warmup(optimizer, args.steps // 10, args.steps)
    return (
        SupervisedTraining(args.dir, train, valid)
        .metrics(LossMetric(), PerplexityMetric(), AccuracyMetric())
        .max_steps(args.steps)
        .validate_every(steps=args.every)
        .checkpoint_every(steps=args.every)
        .precision("bf16-mixed")
        .grads_accumulation(args.accumulate, mean=True)  # averaged, as Trainer does
        .clip_grad_norm(1.0)
        .with_default_checkpointers()
        .overwrite()  # a rerun replaces this example's earlier run
        .launch(Learner(model, optimizer, schedule))
    )


if __name__ == "__main__":
    main()
