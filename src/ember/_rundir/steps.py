"""``steps.jsonl``: the global step of every metric log line of a split.

One file per split, ``{run}/{split}/steps.jsonl``, says at which global step (the run's optimizer
steps so far, a ``MetricValue``'s ``step``) each line of the split's metric files was logged: a
section per epoch, begun by ``["epoch", N]``, then run-length encoded JSON arrays, one per run of
lines at one step, ``[step, n1, n2, ...]`` (``n_i`` more lines of the i-th metric at ``step``),
after a header naming the metrics, ``["step", "Loss", "Accuracy"]`` (written again when a metric
joins). It is one short line per optimizer step, made when the step is over (:class:`SplitSteps`),
so the file's bytes do not depend on when lines reach the disk, and a resumed run's equal an
uninterrupted one's: a resumed run cuts the file back at the section of the epoch it starts
(:func:`cut_steps`), or, in a split resumed mid-way, at the size its checkpoint recorded, with the
open step's counts (:meth:`SplitSteps.state`). One file per split, not per epoch: a short epoch's
cost is the files it makes, and the metric files keep Burn's format and names.
:func:`read_steps` reads it back (complete lines only, under the run readers' guards:
``guards.py``); the writer is ``FileMetricLogger`` (``ember/train/_logger/file.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ember._rundir.guards import MAX_EPOCH, read_run_lines

__all__ = [
    "STEPS_FILE",
    "Logged",
    "SplitSteps",
    "StepRuns",
    "cut_steps",
    "epoch_line",
    "read_steps",
]

STEPS_FILE = "steps.jsonl"
"""The file, in each ``{split}`` directory, of the global step of every metric line."""

_EPOCH_MARK = b'["epoch",'  # how a section of the steps file begins


class Logged(Protocol):
    """A line logged at a step: a metric's ``MetricValue`` (``ember/train/_metric/values.py``)."""

    @property
    def name(self) -> str:
        """The metric's name."""
        ...

    @property
    def step(self) -> int:
        """The run's optimizer steps when it was logged."""
        ...


StepRuns = list[tuple[int, int]]
"""The global steps of a metric's lines in one epoch, run-length encoded: ``(step, lines)``."""


def read_steps(
    directory: str | os.PathLike[str], root: str | os.PathLike[str]
) -> dict[int, dict[str, StepRuns]]:
    """The global steps of the lines of every metric logged in ``directory`` (a ``{split}``
    directory of the run in ``root``), by epoch and metric name, read from its
    :data:`STEPS_FILE`; {} when the split has none (written before ember kept steps). A line
    that is not what the logger writes raises ``ValueError`` naming the file and the line."""
    path = os.path.join(directory, STEPS_FILE)
    epochs: dict[int, dict[str, StepRuns]] = {}
    steps: dict[str, StepRuns] | None = None
    names: list[str] = []
    for number, line in enumerate(read_run_lines(path, root), start=1):
        try:
            row = json.loads(line)
            if row[0] == "epoch":
                steps, names = epochs.setdefault(_epoch(row[1]), {}), []
                continue
            if row[0] == "step":
                names = [str(name) for name in row[1:]]
                continue
            if steps is None:
                raise ValueError("a step line before the first epoch line")
            step, counts = int(row[0]), row[1:]
            for name, count in zip(names, counts, strict=True):
                if int(count) > 0:
                    steps.setdefault(name, []).append((step, int(count)))
        except (ValueError, TypeError, IndexError, KeyError, RecursionError) as error:
            raise ValueError(f"{path}:{number}: not a step line ({error}): {line!r}") from None
    return epochs


def _epoch(value: Any) -> int:
    epoch = int(value)  # a JSON value: ValueError or TypeError if not a number
    if not 1 <= epoch <= MAX_EPOCH:
        raise ValueError(f"the epoch {value!r} is not between 1 and {MAX_EPOCH}")
    return epoch


def cut_steps(path: str, epoch: int) -> None:
    """Cut the steps file ``path`` back to before the section of ``epoch`` or a later one (a
    re-run epoch's steps start anew) and any line a crash left unfinished, making its directory
    if the split is new."""
    with contextlib.suppress(FileExistsError):  # a file where the split's directory belongs:
        os.makedirs(os.path.dirname(path), exist_ok=True)  # reading it below says so
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        return
    start = 0
    while (start := data.find(_EPOCH_MARK, start)) >= 0:
        end = data.find(b"\n", start)
        if end < 0:  # the last line, unfinished: cut below
            break
        at_line_start = start == 0 or data[start - 1] == ord("\n")
        number = data[start + len(_EPOCH_MARK) : end].removesuffix(b"]")
        if at_line_start and not number.isdigit():
            raise ValueError(f"{path}: not a steps file's epoch line at byte {start}: {number!r}")
        if at_line_start and int(number) >= epoch:
            os.truncate(path, start)
            return
        start = end
    if not data.endswith(b"\n"):  # a line a crash cut short: the next section starts a line
        os.truncate(path, data.rfind(b"\n") + 1)


def epoch_line(epoch: int) -> str:
    """The line that begins ``epoch``'s section."""
    return _json_line(["epoch", epoch])


class SplitSteps:
    """The global steps of one split's lines so far, as :data:`STEPS_FILE` lines (see the
    module doc): counts per metric for the current step, a line when the step changes.

    A line is made only when its step is over (or the split): so the file is the same bytes
    whenever the lines reach the disk, and a mid-round checkpoint keeps the open step's counts
    in its position (:meth:`state`) for the resumed run to go on with."""

    __slots__ = ("announced", "counts", "lines", "names", "step")

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        state = state or {}
        self.names: dict[str, int] = {name: i for i, name in enumerate(state.get("names", []))}
        self.announced: int = state.get("announced", 0)  # how many names the last header gave
        self.step: int | None = state.get("step")
        self.counts: list[int] = list(state.get("counts", [0] * len(self.names)))
        self.lines: list[str] = []  # made, not yet handed off

    def state(self) -> dict[str, Any]:
        """What a resumed split needs to go on: the names, the open step and its counts."""
        return {
            "names": list(self.names),
            "announced": self.announced,
            "step": self.step,
            "counts": list(self.counts),
        }

    def add(self, values: Sequence[Logged]) -> None:
        """Count one line per value, at its step."""
        names, counts = self.names, self.counts
        for value in values:
            if value.step != self.step:
                self.close_step()
                self.step = value.step
            index = names.get(value.name)
            if index is None:
                index = names[value.name] = len(counts)
                counts.append(0)
            counts[index] += 1

    def take(self) -> list[str]:
        """The lines made so far (the open step's come when it is over)."""
        lines, self.lines = self.lines, []
        return lines

    def close_step(self) -> None:
        """Make the open step's line (the step, or the split, is over)."""
        if not any(self.counts):
            return
        if len(self.names) > self.announced:
            self.lines.append(_json_line(["step", *self.names]))
            self.announced = len(self.names)
        # integers only: written out (json.dumps would cost a small model's batch a few us)
        self.lines.append(f"[{self.step},{','.join(map(str, self.counts))}]")
        self.counts[:] = [0] * len(self.counts)  # in place: add() holds the list


def _json_line(row: list[object]) -> str:
    return json.dumps(row, separators=(",", ":"), ensure_ascii=False)
