"""ember's exception tree.

::

    EmberError                  anything ember raises on purpose
    ├── DataLoaderError         a loader cannot go on (bad state, closed loader)
    ├── CheckpointError         a checkpoint is missing, incomplete, corrupted or does not fit
    ├── NonFiniteLossError      a training loss became NaN or infinite ("finite only")
    ├── DistributedError        a rank of a data-parallel job failed or died ("data parallel")
    ├── RunDirectoryError       the run directory holds another run, or another process writes it
    ├── RunFileError            a file of a run directory cannot be read back (also a ValueError)
    └── TrainingError           training failed (``launch``): chained to the error, ``.result``

Bad arguments raise the built-in ``ValueError`` / ``TypeError``; errors raised by the user's
own code (a dataset, a batcher, a step) keep their original type; when they end a training,
``launch`` raises :class:`TrainingError` from them, after the run is finished. Stopping early or
on user request is not an error: it is a reason on ``LearningResult``; a stop asked for by a
scheduler's signal ends the process with :data:`REQUEUE_EXIT_CODE` (``train/_signals.py``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "REQUEUE_EXIT_CODE",
    "CheckpointError",
    "DataLoaderError",
    "DistributedError",
    "EmberError",
    "NonFiniteLossError",
    "RunDirectoryError",
    "RunFileError",
    "TrainingError",
]

REQUEUE_EXIT_CODE = 75
"""The exit code of a process whose training a preemption signal (SIGTERM, SIGUSR1) stopped at
a checkpoint: ``EX_TEMPFAIL``, "try again"; a job script requeues it and the run resumes."""


class EmberError(Exception):
    """Base class of the errors ember raises on purpose."""


class DataLoaderError(EmberError):
    """A data loader cannot go on: its state does not fit, or it was closed."""


class CheckpointError(EmberError):
    """A checkpoint is missing, incomplete, corrupted, or does not fit the model."""


class NonFiniteLossError(EmberError):
    """A training loss became NaN or infinite; training stopped without checkpointing it."""


class DistributedError(EmberError):
    """A rank of a data-parallel job failed, died, or a collective operation could not finish.

    ``exit_codes`` maps the ranks that failed to their exit codes (for ``spawn``; a negative
    code is the signal that killed the process).
    """

    def __init__(self, message: str, exit_codes: dict[int, int] | None = None) -> None:
        super().__init__(message)
        self.exit_codes = dict(exit_codes or {})


class RunDirectoryError(EmberError):
    """The run directory cannot be written: it holds another run, or another process holds it."""


class RunFileError(EmberError, ValueError):
    """A file of a run directory cannot be read back: not a regular file inside the run, too big,
    nested too deeply, or not UTF-8 (``docs/training.md``, "Runs as data").

    Also a ``ValueError``, which ``ember.runs.load`` raised for an unreadable file before.
    """


class TrainingError(EmberError):
    """Training failed: ``launch`` raises it from the error once the run is finished.

    The run is finished first: logs flushed, checkpoints written, loggers and renderer closed.
    ``result`` is the run's ``LearningResult`` (its ``error`` is the original exception, its
    ``model`` the model as training left it). ``SupervisedTraining.errors_in_result()`` returns
    the result instead of raising (Burn's behaviour).
    """

    def __init__(self, message: str, result: Any) -> None:
        super().__init__(message)
        self.result = result
