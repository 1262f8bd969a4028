"""The ``ember`` command: ``ember demo`` runs the seed's experiment."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["main"]


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ember", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser(
        "demo", help="the seed's experiment: a hand loop and the Learner, bit for bit"
    )
    demo.add_argument("--workers", type=_non_negative, default=0, help="loader worker threads")
    demo.add_argument("--shuffle", type=int, default=None, metavar="SEED", help="shuffle seed")
    demo.add_argument("--epochs", type=_positive, default=3)
    demo.add_argument("--dir", type=Path, default=Path("artifacts/demo"), help="run directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; the exit code is non-zero when training failed."""
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from ember.demo import format_report, run_demo

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
    raise AssertionError(f"unknown command {args.command}")
