"""A character-level language model trained for N steps over a streamed text file.

The text (``examples/data/hamlet.md``, Shakespeare's *Hamlet*, public domain; see
``hamlet.NOTICE`` for where the file comes from) is read as a stream of windows of
``context + 1`` characters, generated anew each pass and shuffled through a seeded buffer:
nothing is held in memory but the buffer. The run is bounded in optimizer steps
(``max_steps``), validates and checkpoints every ``--every`` steps, and resumes exactly from
its newest checkpoint when run again with ``--resume`` (``docs/training.md``, "Step-granular
training").

    python examples/char_lm.py --steps 600 --every 100
    python examples/char_lm.py --steps 1200 --every 100 --resume   # 600 steps more
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ember.data import DataLoaderBuilder
from ember.train import (
    KeepLastNCheckpoints,
    Learner,
    LearnerModel,
    LearningResult,
    LossMetric,
    PerplexityMetric,
    SequenceOutput,
    SupervisedTraining,
    TrainOutput,
)

TEXT = Path(__file__).resolve().parent / "data" / "hamlet.md"


@dataclass(frozen=True, slots=True)
class Chars:
    """Character ids ``[B, T]`` and the next character of each ``[B, T]``."""

    inputs: torch.Tensor
    targets: torch.Tensor


class Windows:
    """Every ``stride``-th window of ``context + 1`` character ids of ``text[start:end]``,
    generated per pass (a source a ``StreamingDataLoader`` reads)."""

    def __init__(self, ids: torch.Tensor, context: int, stride: int) -> None:
        self.ids, self.context, self.stride = ids, context, stride

    def __call__(self) -> Iterator[list[int]]:
        ids, size = self.ids, self.context + 1
        for start in range(0, len(ids) - size + 1, self.stride):
            yield ids[start : start + size].tolist()


def batch(items: list[list[int]], device: torch.device) -> Chars:
    """Stack windows; inputs are all characters but the last, targets all but the first."""
    windows = torch.tensor(items, dtype=torch.long, device=device)
    return Chars(windows[:, :-1], windows[:, 1:])


class CharModel(LearnerModel):
    """Embedding, a GRU and a read-out over the vocabulary."""

    def __init__(self, vocabulary: int, width: int = 64) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocabulary, width)
        self.gru = nn.GRU(width, width, batch_first=True)
        self.out = nn.Linear(width, vocabulary)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden, _ = self.gru(self.embed(inputs))
        logits: torch.Tensor = self.out(hidden)
        return logits

    def sequence(self, chars: Chars) -> SequenceOutput:
        logits = self(chars.inputs)
        loss = F.cross_entropy(logits.flatten(0, 1), chars.targets.flatten())
        return SequenceOutput(loss, logits, chars.targets)

    def train_step(self, chars: Chars) -> TrainOutput[SequenceOutput]:
        out = self.sequence(chars)
        return TrainOutput.from_loss(self, out.loss, out)

    def inference_step(self, chars: Chars) -> SequenceOutput:
        return self.sequence(chars)


def main(argv: Sequence[str] | None = None) -> LearningResult[CharModel]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600, help="optimizer steps in all")
    parser.add_argument("--every", type=int, default=100, help="validate and checkpoint")
    parser.add_argument("--context", type=int, default=64, help="characters per window")
    parser.add_argument("--chars", type=int, default=None, help="use the first N characters")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dir", default="artifacts/char_lm")
    parser.add_argument("--resume", action="store_true", help="resume the newest checkpoint")
    args = parser.parse_args(argv)

    text = TEXT.read_text(encoding="utf-8")[: args.chars]
    vocabulary = {c: i for i, c in enumerate(sorted(set(text)))}
    ids = torch.tensor([vocabulary[c] for c in text], dtype=torch.long)
    split = len(ids) * 9 // 10  # the last tenth validates
    train = (
        DataLoaderBuilder(batch)
        .batch_size(args.batch)
        .shuffle(7, buffer_size=512)
        .build(Windows(ids[:split], args.context, 8))
    )
    valid = (
        DataLoaderBuilder(batch)
        .batch_size(args.batch)
        .build(Windows(ids[split:], args.context, args.context))
    )

    torch.manual_seed(0)
    model = CharModel(len(vocabulary))
    training = (
        SupervisedTraining(args.dir, train, valid)
        .metrics(LossMetric(), PerplexityMetric())
        .max_steps(args.steps)
        .validate_every(steps=args.every)
        .checkpoint_every(steps=args.every)
        .with_checkpointing_strategy(KeepLastNCheckpoints(2))
        .with_default_checkpointers()
        .summary()
    )
    if args.resume:
        training = training.resume_latest()
    return training.launch(Learner(model, torch.optim.Adam(model.parameters()), 3e-3))


if __name__ == "__main__":
    result = main()
    if result.error is not None:
        raise SystemExit(result.traceback)
