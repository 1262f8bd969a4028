"""Callbacks: the loop's extension point (``base.py``), how a run calls them (``called.py``),
and the catalogue written on it alone: ``EMA``, stochastic weight averaging, ``max_time``'s
budget, the profiler (the learning-rate range test, ``_lr_find.py``, is one too)."""
