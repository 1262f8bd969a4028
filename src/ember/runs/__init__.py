"""ember.runs: what a training run wrote, read back: its configuration, how it ended, its values.

The run directory's files are the source (``config.json``, ``summary.json``, the metric logs,
the checkpoints' records, ``experiment.log``). :func:`load` reads one run (:class:`Run`) or
several (:class:`Runs`); their values come as :class:`MetricRow` rows, one per epoch value or
per batch, or as a pandas DataFrame (``ember[pandas]``). :func:`plot` overlays runs' curves and
:func:`compare` sets them side by side (``ember plot``, ``ember compare``). A file the run
readers refuse (not a regular file inside the run, too big, nested too deeply, not UTF-8:
``ember/_rundir/guards.py``) is a :class:`RunFileError` naming it. See ``docs/training.md``,
"Runs as data".
"""

from ember._errors import RunFileError
from ember.runs._compare import compare
from ember.runs._logs import MetricRow
from ember.runs._plot import plot
from ember.runs._run import Run, Runs, load

__all__ = ["MetricRow", "Run", "RunFileError", "Runs", "compare", "load", "plot"]
