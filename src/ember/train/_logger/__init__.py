"""Metric loggers: files on disk (always, unless turned off), memory, one CSV file, TensorBoard,
MLflow; the protocols a tracker implements."""
