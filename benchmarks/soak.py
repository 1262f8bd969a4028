"""Soak: does anything grow with epochs? RSS, open files and threads over a long run.

The seed workload (``ember.app.demo``: its Mlp, 200 training and 64 validation samples, batch
32, Adam, Loss on both splits, metric files, default checkpointers keeping the last two epochs
and the best valid Loss) runs for ``--epochs`` epochs in one ``launch``. Every ``--every``
epochs, on ``train-worker`` (the renderer's ``update_epoch``), it prints the resident set size,
the open file descriptors and the live threads. Flat numbers after the first report are the
claim; one line per report, then the totals. Not a test: it prints.

    python benchmarks/soak.py [--epochs 3000] [--every 500] [--no-checkpoints]
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import threading
import time
from pathlib import Path
from typing import TextIO

import torch

from ember.app.demo import Mlp, _loader, make_samples
from ember.train import CliMetricsRenderer, Learner, LossMetric, SupervisedTraining


def rss_mib() -> float:
    """The resident set size now, from /proc (the peak from getrusage elsewhere)."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def open_files() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


class SoakRenderer(CliMetricsRenderer):
    """A quiet renderer that prints the process's resources every ``every`` epochs."""

    def __init__(self, every: int, stream: TextIO) -> None:
        super().__init__(stream)
        self.every = every
        self.started = time.monotonic()
        self.rows: list[tuple[int, float, int, int]] = []

    def update_epoch(self, epoch: int) -> None:
        super().update_epoch(epoch)
        if epoch == 1 or epoch % self.every == 0:
            row = (epoch, rss_mib(), open_files(), threading.active_count())
            self.rows.append(row)
            elapsed = time.monotonic() - self.started
            print(
                f"epoch {row[0]:>6}  rss {row[1]:8.1f} MiB  open files {row[2]:>4}  "
                f"threads {row[3]:>3}  ({elapsed:6.1f} s)",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3000)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--no-checkpoints", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Mlp()
    with (
        open(os.devnull, "w", encoding="utf-8") as null,  # lines that nobody keeps
        tempfile.TemporaryDirectory(prefix="ember-soak-") as directory,
    ):
        renderer = SoakRenderer(args.every, null)
        builder = (
            SupervisedTraining(
                Path(directory),
                _loader(make_samples(200, seed=1), 0, 7),
                _loader(make_samples(64, seed=2), 0, None),
            )
            .renderer(renderer)
            .metric_train_numeric(LossMetric())
            .metric_valid_numeric(LossMetric())
            .num_epochs(args.epochs)
        )
        if not args.no_checkpoints:
            builder = builder.with_default_checkpointers()
        started = time.monotonic()
        result = builder.launch(Learner(model, torch.optim.Adam(model.parameters()), 1e-2))
        elapsed = time.monotonic() - started
    if result.error is not None:
        raise SystemExit(f"the soak run failed:\n{result.traceback}")
    first, last = renderer.rows[1 if len(renderer.rows) > 2 else 0], renderer.rows[-1]
    print(
        f"{result.last_epoch} epochs in {elapsed:.1f} s; from epoch {first[0]} to {last[0]}: "
        f"rss {last[1] - first[1]:+.1f} MiB, open files {last[2] - first[2]:+d}, "
        f"threads {last[3] - first[3]:+d}; after launch: {threading.active_count()} thread(s)"
    )


if __name__ == "__main__":
    main()
