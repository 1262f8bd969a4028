"""The ``ember`` command.

``ember demo`` runs the seed's experiment; ``ember summary DIR`` prints a run's summary table;
``ember plot DIR [DIR ...]`` draws the metric curves of one run or several overlaid; ``ember
compare DIR DIR ...`` sets runs side by side (best and last values, the configuration keys that
differ); ``ember digits`` trains on real data, ``ember digits --test`` also evaluates its best
epoch on a test set (``ember eval``, its old name, is deprecated); ``ember export DIR`` writes a
run's weights as one safetensors file (``--format hf``: a directory ``from_pretrained`` loads,
for a run of a ``transformers`` model, a saved tokenizer beside it with ``--tokenizer``). Exit
codes: 0 success, 1 training failed, 2 nothing to do (no run, a directory it will not
overwrite, a missing optional extra, a missing or damaged checkpoint or tokenizer), 3 the
demo's losses differ, 141 the reader of the output went away (``ember summary DIR | head``):
the command ends quietly, as a Unix tool that SIGPIPE ends (128 + 13), without a traceback,
and a training it ran stops there.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from ember._version import __version__

__all__ = ["main"]


def _non_negative(text: str) -> int:
    return _integer(text, 0)


def _positive(text: str) -> int:
    return _integer(text, 1)


def _integer(text: str, minimum: int) -> int:
    """``text`` as an int >= ``minimum``; argparse prints the message as it is (a ValueError
    would make it "invalid _positive value", naming this module's private function)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
    return value


def _checkpoint_epoch(text: str) -> int | str:
    if text in ("best", "last"):
        return text
    try:
        return _positive(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be best, last or an epoch number, got {text!r}"
        ) from None


def _plain(text: str) -> str:
    """``text`` without reStructuredText markup (``literals``, :role:`targets`): what --help
    prints is read in a terminal, where the markup is noise."""
    text = re.sub(r":[a-z:]+:`~?([^`]*)`", r"\1", text)
    return re.sub(r"``([^`]*)``", r"\1", text)


def _parser() -> argparse.ArgumentParser:
    from ember.app.digits import DEFAULT_EPOCHS  # scikit-learn itself loads only when digits runs

    parser = argparse.ArgumentParser(prog="ember", description=_plain(__doc__ or ""))
    parser.add_argument("--version", action="version", version=f"ember {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="the seed's experiment: a hand loop and the Learner, bit for bit"
    )
    demo.add_argument("--workers", type=_non_negative, default=0, help="loader worker threads")
    demo.add_argument("--shuffle", type=int, default=None, metavar="SEED", help="shuffle seed")
    demo.add_argument("--epochs", type=_positive, default=3)
    demo.add_argument("--dir", type=Path, default=Path("artifacts/demo"), help="run directory")

    summary = commands.add_parser(
        "summary", help="print a finished run's summary table (summary.json, else the logs)"
    )
    summary.add_argument("directory", type=Path, metavar="DIR", help="run directory")

    plot = commands.add_parser(
        "plot",
        help="draw the per-epoch train and valid curves of every numeric metric, of one run "
        "or of several overlaid (one colour per run)",
    )
    plot.add_argument("directories", type=Path, nargs="+", metavar="DIR", help="run directory")
    plot.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="image to write (the format follows the suffix); default DIR/metrics.png for one "
        "run, required for several",
    )

    compare = commands.add_parser(
        "compare",
        help="per metric, each run's best and last epoch values; the configuration keys that "
        "differ",
    )
    compare.add_argument("directories", type=Path, nargs="+", metavar="DIR", help="run directory")

    digits = commands.add_parser(
        "digits", help="train an MLP on scikit-learn's bundled 8x8 digits (real data)"
    )
    digits.add_argument(
        "--epochs", type=_positive, default=DEFAULT_EPOCHS, help=f"default {DEFAULT_EPOCHS}"
    )
    digits.add_argument(
        "--test",
        action="store_true",
        help="hold out a test set too, keep the best epoch, print its test table",
    )
    digits.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="run directory (default artifacts/digits, with --test artifacts/digits-test)",
    )

    evaluation = commands.add_parser(
        "eval", help="deprecated, removed in ember 0.3: the old name of `ember digits --test`"
    )
    evaluation.add_argument(
        "--epochs", type=_positive, default=DEFAULT_EPOCHS, help=f"default {DEFAULT_EPOCHS}"
    )
    evaluation.add_argument(
        "--dir", type=Path, default=Path("artifacts/eval"), help="run directory"
    )

    export = commands.add_parser(
        "export",
        help="write a run's checkpointed weights as one plain safetensors file, or as a "
        "directory transformers' from_pretrained loads (--format hf)",
    )
    export.add_argument("directory", type=Path, metavar="DIR", help="run directory")
    export.add_argument(
        "--epoch",
        type=_checkpoint_epoch,
        default="best",
        help="best (default: the epoch kept for the checkpointing metric), last, or a number",
    )
    export.add_argument(
        "--format",
        choices=("safetensors", "hf"),
        default="safetensors",
        help="safetensors (default): one file of the weights; hf: a directory with "
        "config.json, generation_config.json (a generative model) and model.safetensors, for "
        "a run of a transformers model",
    )
    export.add_argument(
        "--tokenizer",
        type=Path,
        default=None,
        metavar="TOKDIR",
        help="hf: the directory of a saved tokenizer (tokenizer.save_pretrained(TOKDIR)), "
        "written into the export for AutoTokenizer.from_pretrained",
    )
    export.add_argument(
        "-o",
        "--output",
        type=Path,
        required=True,
        metavar="PATH",
        help="safetensors: the file to write, new or a regular file to replace; hf: the "
        "directory to write, new or empty; in a directory that exists, outside the run's "
        "checkpoint/",
    )
    return parser


def _error(command: str, error: Exception) -> int:
    print(f"ember {command}: {error}", file=sys.stderr)
    return 2


def _summary(directory: Path) -> int:
    from ember.runs import load

    try:
        run = load(directory)
        summary = run.summary or run.summary_from_logs()
    except (OSError, ValueError) as error:
        return _error("summary", error)
    print(summary)
    return 0


def _plot(directories: list[Path], output: Path | None) -> int:
    from ember.runs import load, plot

    try:
        path = plot(load(list(directories)), output)
    except (OSError, ValueError, ImportError) as error:
        return _error("plot", error)
    print(f"wrote {path}")
    return 0


def _compare(directories: list[Path]) -> int:
    from ember.runs import compare, load

    try:
        text = compare(load(list(directories)))
    except (OSError, ValueError) as error:
        return _error("compare", error)
    print(text)  # outside: a broken pipe is the reader's going, not a run that cannot be read
    return 0


_EVAL_DEPRECATED = (
    "ember eval: deprecated, removed in ember 0.3: it trains the digits demo with a test set, "
    "now `ember digits --test`; to evaluate a run of yours on a test loader, see "
    'docs/training.md, "A finished run, later"'
)


def _digits(directory: Path | None, epochs: int, *, test: bool, command: str) -> int:
    from ember._errors import TrainingError
    from ember.app.digits import run_digits

    if directory is None:
        directory = Path("artifacts/digits-test" if test else "artifacts/digits")
    try:
        report = run_digits(directory, epochs=epochs, test=test, command=command)
    except TrainingError as error:  # the renderer has shown it, and where its traceback is
        if isinstance(error.__cause__, BrokenPipeError):  # the progress's reader went away
            raise error.__cause__ from None
        print(f"ember {command}: {error}", file=sys.stderr)
        return 1
    except (ValueError, ImportError) as error:
        return _error(command, error)
    if test and report.evaluation is not None:
        best = report.result.best_epoch
        print(f"Test accuracy of epoch {best}: {report.evaluation.value('Accuracy'):.2f} %")
        print(f"Export its weights: ember export {directory} -o model.safetensors")
        return 0
    if report.accuracy is not None:
        print(
            f"Validation accuracy after epoch {report.result.last_epoch}: {report.accuracy:.2f} %"
        )
    print(f"Plot the curves: ember plot {directory}")
    return 0


def _export(
    directory: Path, epoch: int | str, output: Path, form: str, tokenizer: Path | None
) -> int:
    from ember._errors import CheckpointError
    from ember.train._checkpoint.export import export_weights
    from ember.train._checkpoint.pretrained import export_pretrained

    if tokenizer is not None and form != "hf":
        return _error("export", ValueError("--tokenizer goes with --format hf: add it"))
    write = partial(export_pretrained, tokenizer=tokenizer) if form == "hf" else export_weights
    try:
        number = write(directory, output, epoch)  # type: ignore[arg-type]  # parsed
    except (CheckpointError, OSError, ValueError, ImportError) as error:
        return _error("export", error)
    what = "a transformers model directory" if form == "hf" else "the weights"
    with_tokenizer = "" if tokenizer is None else f", with the tokenizer of {tokenizer}"
    print(f"wrote {output} ({what} of epoch {number} of {directory}{with_tokenizer})")
    return 0


_READER_GONE = 141
"""The exit code when standard output's reader went away: a Unix tool's under SIGPIPE."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit code is non-zero when training failed, 141 when the reader
    of the output went away (see the module doc)."""
    try:
        try:
            return _command(argv)
        finally:  # a reader gone is found here (block-buffered pipe), not at the exit
            sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        return _READER_GONE


def _drop_stdout() -> None:
    """Send what is left for standard output to ``os.devnull``: the interpreter flushes it at
    exit, which would fail on the broken pipe again (Python's "Note on SIGPIPE")."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):
        return  # not a file (a test's capture): nothing is flushed at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


def _command(argv: Sequence[str] | None) -> int:
    """Parse ``argv`` and run the command it names."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from ember.app.demo import format_report, run_demo

        try:
            report = run_demo(
                args.dir, epochs=args.epochs, workers=args.workers, shuffle=args.shuffle
            )
        except ValueError as error:
            print(f"ember demo: {error}", file=sys.stderr)
            return 2
        print(format_report(report, args.dir))
        if not report.result.succeeded:
            return 1
        return 0 if report.identical else 3
    if args.command == "summary":
        return _summary(args.directory)
    if args.command == "plot":
        return _plot(args.directories, args.output)
    if args.command == "compare":
        return _compare(args.directories)
    if args.command == "digits":
        command = "digits --test" if args.test else "digits"
        return _digits(args.dir, args.epochs, test=args.test, command=command)
    if args.command == "eval":
        print(_EVAL_DEPRECATED, file=sys.stderr)
        return _digits(args.dir, args.epochs, test=True, command="eval")
    if args.command == "export":
        return _export(args.directory, args.epoch, args.output, args.format, args.tokenizer)
    raise AssertionError(f"unknown command {args.command}")
