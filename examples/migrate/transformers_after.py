"""A ``transformers.Trainer`` run brought over to ember: the ember half of
docs/migrate/transformers.md.

The Trainer script (in the guide) trains a small GPT-2, built from a ``GPT2Config`` (randomly
initialised: nothing is downloaded), on the bytes of *Hamlet* (``examples/data/hamlet.md``) with
``TrainingArguments``: bf16, gradient accumulation, clipping, a warm-up then cosine decay,
evaluation and checkpoints every 50 steps, the best model kept; then ``save_model``. Here each
``TrainingArguments`` field is the ``TrainingOptions`` field named after the builder method it
calls (the comments name the field it replaces), and ``ember.cli`` reads them from the command
line as ``HfArgumentParser`` would::

    python examples/migrate/transformers_after.py
    python examples/migrate/transformers_after.py --training.max_steps 400
    python examples/migrate/transformers_after.py --help

The run goes to ``artifacts/migrate-gpt2``, its best weights to ``artifacts/migrate-gpt2/hf``,
a directory ``GPT2LMHeadModel.from_pretrained`` loads. Needs ``pip install ember[cli,hf]``.
"""

from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel, get_cosine_schedule_with_warmup

import ember
from ember import DataLoaderBuilder, InMemDataset, Learner, LossMetric, SupervisedTraining
from ember.train import Every, TorchLrScheduler, TrainingOptions, export_pretrained

TEXT = Path(__file__).resolve().parents[1] / "data" / "hamlet.md"


def blocks(ids: torch.Tensor, context: int = 64) -> InMemDataset[dict[str, torch.Tensor]]:
    """Consecutive windows of ``context`` byte ids; the model shifts its labels itself."""
    windows = ids[: len(ids) // context * context].view(-1, context)
    return InMemDataset({"input_ids": window, "labels": window} for window in windows)


def main(
    training: TrainingOptions = TrainingOptions(
        max_steps=200,  # max_steps=200
        grads_accumulation=2,  # gradient_accumulation_steps=2,
        grads_accumulation_mean=True,  # ... averaged, as Trainer does
        precision="bf16-mixed",  # bf16=True
        clip_grad_norm=1.0,  # max_grad_norm=1.0 (Trainer's default; ember clips when asked)
        validate_every=Every(steps=50),  # eval_strategy="steps", eval_steps=50
        checkpoint_every=Every(steps=50),  # save_strategy="steps", save_steps=50
        default_checkpointers=True,  # save_total_limit=2, load_best_model_at_end=True
        seed=0,  # seed=0
    ),
    directory: Path = Path("artifacts/migrate-gpt2"),  # output_dir
) -> None:
    """Train a small GPT-2 on Hamlet, then export its best weights for from_pretrained."""
    ids = torch.tensor(list(TEXT.read_bytes()), dtype=torch.long)
    split = len(ids) * 9 // 10
    train = DataLoaderBuilder().batch_size(8).shuffle(0).build(blocks(ids[:split]))
    valid = DataLoaderBuilder().batch_size(8).build(blocks(ids[split:]))  # per_device_*_batch_size
    config = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4)
    config.bos_token_id = config.eos_token_id = 0  # the tokens are the 256 byte values
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)  # learning_rate
    cosine = get_cosine_schedule_with_warmup(optimizer, 20, training.max_steps)  # warmup_steps=20
    result = (
        SupervisedTraining(directory, train, valid)
        .metrics(LossMetric())
        .with_options(training)
        .launch(Learner(model, optimizer, TorchLrScheduler(cosine, interval="step")))
    )
    export_pretrained(result.directory, result.directory / "hf")  # trainer.save_model(...)


if __name__ == "__main__":
    ember.cli(main)
